#!/usr/bin/env python
"""Seconds per GRPO step: EvoTrainer vs TRL's GRPOTrainer, and our harness overhead.

Same model (the shipped builtin:tiny-char), same task (arithmetic train split,
binary correctness reward), same batch shape (16 prompts x 8 generations, up
to 8 new tokens, newline stop), same objective settings (eps 0.20/0.27, one
update per batch, KL coefficient `--kl`: 0 by default, TRL's own default, so
neither trainer runs a reference model and the bare floor below is the true
floor; `--kl 0.001` adds the paper's weak KL, i.e. one more forward pass per
step in both trainers), same number of steps, all in one run on the CPU:

1. ours  - `evo.train.trainer.Trainer.run_step`: rollout, rewards, filters,
           advantages, update, rollouts shard + metrics line (everything a step does);
2. bare  - the floor: the same batch sampled by the same policy backend
           (`HFPolicy.generate_ids`, i.e. our lean KV-cached sampler) + one plain
           forward + backward over prompt + completion; ours / bare - 1 is the
           harness overhead on top of generation and a gradient step;
3. trl   - `trl.GRPOTrainer` (installed in the bench's own venv, `.venv-bench`,
           created on first use with `pip install trl`; the package itself never
           depends on trl). Run as a subprocess of this script.

Ours is timed under every `grpo.loss_aggregation` (`--modes`), each against the
one TRL run; the aggregation only reweighs trajectories, so the modes should
cost the same.

Correctness against the peer, in the same run: on one batch sampled by the
base policy, with an updated policy (the base plus seeded noise, so ratios
differ from 1 and the clip binds) and the base as the old and reference policy
(KL 0.04), our `token-mean` loss (our forward, `evo.train.objective`) and TRL's
`_compute_loss` with `loss_type="dapo"` (TRL's forward) must agree to 1e-6; the
gradients' largest difference is reported beside it. TRL 1.16 multiplies the k3
KL by the token ratio by default (`use_bias_correction_kl=True`); the check
turns that off, since ours is the paper's plain k3 term. The prompts of that batch
have equal token lengths, since TRL's forward does not correct positions for
left padding.

The first `--warmup` steps of each are not timed. Goals: ours >= 1.5x faster per
step than TRL under every mode, overhead (ours under `paper` / bare - 1) <= 25%,
the loss check within 1e-6. The last line is JSON.

    .venv/bin/python bench/grpo_vs_trl.py [--steps 8] [--warmup 2] [--modes paper,token-mean]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPTS, GENERATIONS, MAX_NEW_TOKENS, LR, SEED = 16, 8, 8, 5e-4, 0
GOAL_SPEEDUP, GOAL_OVERHEAD, GOAL_LOSS_DIFF = 1.5, 0.25, 1e-6
CHECK_KL, CHECK_NOISE = 0.04, 0.02
MODES = ("paper", "token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _recipe(steps: int, kl: float, mode: str = "paper") -> dict:
    from evo.recipe import normalize_recipe

    return normalize_recipe({
        "name": "bench", "seed": SEED, "domain": {"name": "arithmetic"}, "model": {"name": "builtin:tiny-char"},
        "rollout": {"prompts_per_step": PROMPTS, "num_generations": GENERATIONS, "max_new_tokens": MAX_NEW_TOKENS},
        "grpo": {"steps": steps, "learning_rate": LR, "kl_coef": kl, "micro_batch_size": PROMPTS * GENERATIONS,
                 "loss_aggregation": mode},
    })


def _timed(fn, steps: int, warmup: int) -> list[float]:
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        fn(i)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def bench_ours(steps: int, warmup: int, kl: float, mode: str = "paper") -> list[float]:
    from evo.recipe import recipe_hash
    from evo.train.trainer import Trainer

    recipe = _recipe(steps + warmup, kl, mode)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(recipe, Path(tmp), rhash=recipe_hash(recipe))
        return _timed(trainer.run_step, steps, warmup)


def bench_bare(steps: int, warmup: int) -> list[float]:
    """The policy's own sampler on the same batch, then one forward + backward over prompt + completion."""
    import torch

    from evo.domains.arithmetic import ArithmeticEnv
    from evo.train.policy import load_policy
    from evo.train.run import pick_tasks

    policy = load_policy("builtin:tiny-char")
    tasks = ArithmeticEnv().tasks("train")
    pad = policy.tokenizer.pad_token_id

    def step(i: int) -> None:
        prompts = [policy.encode_prompt(t.prompt) for t in pick_tasks(tasks, SEED, i, PROMPTS) for _ in range(GENERATIONS)]
        gens = policy.generate_ids(prompts, max_new_tokens=MAX_NEW_TOKENS, stop=["\n"], seed=i)
        rows = [p + g.token_ids for p, g in zip(prompts, gens)]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), pad, dtype=torch.long)  # (B, L)
        for j, r in enumerate(rows):
            ids[j, : len(r)] = torch.tensor(r)
        policy.model.train()
        logits = policy.model(input_ids=ids, attention_mask=(ids != pad).long()).logits[:, :-1]  # (B, L-1, V)
        logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, L-1)
        policy.model.zero_grad(set_to_none=True)
        (-logp.mean()).backward()

    return _timed(step, steps, warmup)


def trl_worker(steps: int, warmup: int, kl: float) -> list[float]:
    """Runs inside .venv-bench: TRL's GRPOTrainer on the same model, task and batch shape."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from evo.domains.arithmetic import ArithmeticEnv, score_completion
    from evo.train.policy import load_policy

    policy = load_policy("builtin:tiny-char")
    tok = policy.tokenizer
    newline = tok("\n", add_special_tokens=False).input_ids[0]
    tasks = ArithmeticEnv().tasks("train")
    data = Dataset.from_list([{"prompt": t.prompt, "answer": int(t.answer)} for t in tasks])

    def correctness(prompts, completions, answer, **_):
        return [score_completion(c, a)[0]["correctness"] for c, a in zip(completions, answer)]

    class StepClock(TrainerCallback):
        def __init__(self):
            self.ends = []

        def on_step_end(self, args, state, control, **kw):
            self.ends.append(time.perf_counter())

    clock = StepClock()
    with tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(
            output_dir=tmp, use_cpu=True, seed=SEED, max_steps=steps + warmup + 1, learning_rate=LR,
            per_device_train_batch_size=PROMPTS * GENERATIONS, gradient_accumulation_steps=1,
            num_generations=GENERATIONS, max_completion_length=MAX_NEW_TOKENS, temperature=1.0, top_p=1.0,
            beta=kl, epsilon=0.2, epsilon_high=0.27, num_iterations=1, logging_steps=1, save_strategy="no",
            report_to=[], disable_tqdm=True, dataloader_num_workers=0, bf16=False,
            # Parity with ours: constant LR, no activation checkpointing (TRL enables it by default).
            lr_scheduler_type="constant", gradient_checkpointing=False,
            generation_kwargs={"eos_token_id": [tok.eos_token_id, newline], "top_k": 0},
        )
        trainer = GRPOTrainer(model=policy.model, reward_funcs=correctness, args=config, train_dataset=data,
                              processing_class=tok, callbacks=[clock])
        trainer.train()
    # Step i's duration = end(i) - end(i-1); the first step has no start mark and is warm-up anyway.
    gaps = [b - a for a, b in zip(clock.ends, clock.ends[1:])]
    return gaps[warmup: warmup + steps]


def trl_loss_check() -> dict:
    """Runs inside .venv-bench: our token-mean loss vs TRL's dapo loss on one batch (module docstring)."""
    import tempfile as _tempfile
    from collections import Counter

    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from evo.domains.arithmetic import ArithmeticEnv, score_completion
    from evo.train.forward import build_batch, response_logits
    from evo.train.objective import gather_logprobs, group_advantages, grpo_loss, trajectory_weights
    from evo.train.policy import load_policy
    from evo.train.types import Trajectory

    old, new = load_policy("builtin:tiny-char"), load_policy("builtin:tiny-char")
    torch.manual_seed(SEED)
    with torch.no_grad():  # an updated policy: ratios away from 1, so the clip and the KL term are live
        for p in new.model.parameters():
            p.add_(CHECK_NOISE * torch.randn_like(p))
    tok, pad = old.tokenizer, old.tokenizer.pad_token_id
    tasks = ArithmeticEnv().tasks("train")
    width = Counter(len(old.encode_prompt(t.prompt)) for t in tasks).most_common(1)[0][0]
    chosen = [t for t in tasks if len(old.encode_prompt(t.prompt)) == width][:PROMPTS]
    prompts = [old.encode_prompt(t.prompt) for t in chosen for _ in range(GENERATIONS)]
    gens = old.generate_ids(prompts, max_new_tokens=MAX_NEW_TOKENS, stop=["\n"], seed=SEED)
    keep = [i for i, g in enumerate(gens) if g.token_ids]  # TRL scores no empty completion either
    n = len(prompts)
    rewards = torch.tensor([score_completion(g.text, chosen[i // GENERATIONS].answer)[0]["correctness"]
                            for i, g in enumerate(gens)], dtype=torch.float64)  # (n,)
    groups = torch.arange(n) // GENERATIONS  # (n,)
    adv = group_advantages(rewards, groups)  # (n,)
    trajs = [Trajectory("t", "s", int(groups[i]), i, "", prompts[i], list(gens[i].token_ids),
                        [1] * len(gens[i].token_ids), gens[i].text, gens[i].finish_reason, False) for i in keep]
    tokens = torch.tensor([len(t.response_ids) for t in trajs])  # (m,)
    weights = trajectory_weights(groups[keep], torch.ones(len(keep), dtype=torch.bool), mode="token-mean",
                                 tokens=tokens)  # (m,)
    batch = build_batch(trajs, adv[keep].tolist(), weights.tolist(), pad)
    rows = list(range(len(trajs)))
    new.model.eval()
    with torch.no_grad():
        old_logits, targets, mask = response_logits(old.model, batch, rows)  # (m, R, V), (m, R), (m, R)
        old_logp = gather_logprobs(old_logits, targets)  # (m, R)
    logp = gather_logprobs(*response_logits(new.model, batch, rows)[:2])  # (m, R)
    ours, _ = grpo_loss(logp, old_logp, batch.advantages, mask, batch.weights, ref_logp=old_logp,
                        eps_low=0.2, eps_high=0.27, kl_coef=CHECK_KL)
    new.model.zero_grad(set_to_none=True)
    ours.backward()
    ours_grad = {k: p.grad.clone() for k, p in new.model.named_parameters()}

    with _tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(output_dir=tmp, use_cpu=True, seed=SEED, loss_type="dapo", beta=CHECK_KL, epsilon=0.2,
                            epsilon_high=0.27, per_device_train_batch_size=PROMPTS * GENERATIONS,
                            num_generations=GENERATIONS, max_completion_length=MAX_NEW_TOKENS, report_to=[],
                            save_strategy="no", disable_tqdm=True, bf16=False, gradient_checkpointing=False,
                            use_bias_correction_kl=False)
        data = Dataset.from_list([{"prompt": t.prompt} for t in chosen])
        trainer = GRPOTrainer(model=new.model, reward_funcs=lambda completions, **_: [0.0] * len(completions),
                              args=config, train_dataset=data, processing_class=tok)
        completion = torch.full((len(keep), int(mask.shape[1])), pad, dtype=torch.long)  # (m, R) right-padded
        completion[mask] = targets[mask]
        prompt_ids = torch.tensor([prompts[i] for i in keep])  # (m, P): equal lengths, no padding
        full_mask = torch.cat([torch.ones_like(prompt_ids), mask.long()], dim=1)  # (m, P + R)
        # TRL's forward runs on the model it prepared: score the old policy by loading its weights there a moment.
        updated = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        trainer.model.load_state_dict(old.model.state_dict())
        with torch.no_grad():
            old_trl = trainer._get_per_token_logps_and_entropies(trainer.model, torch.cat([prompt_ids, completion], 1),
                                                                 full_mask, completion.shape[1])[0]  # (m, R)
        trainer.model.load_state_dict(updated)
        inputs = {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids), "completion_ids": completion,
                  "completion_mask": mask.long(), "advantages": batch.advantages, "old_per_token_logps": old_trl,
                  "ref_per_token_logps": old_trl, "num_items_in_batch": mask.sum()}
        trainer.model.eval()  # eval-mode normaliser: the whole batch, no accumulation window
        theirs = trainer._compute_loss(trainer.model, inputs)
        new.model.zero_grad(set_to_none=True)
        theirs.backward()
        grad_diff = max(float((p.grad - ours_grad[k]).abs().max()) for k, p in new.model.named_parameters())
    clipped = float(((torch.exp(logp - old_logp) > 1.27) | (torch.exp(logp - old_logp) < 0.8))[mask].float().mean())
    ours, theirs = float(ours.detach()), float(theirs.detach())
    return {"ours_loss": ours, "trl_loss": theirs, "loss_abs_diff": abs(ours - theirs),
            "grad_max_abs_diff": grad_diff, "trajectories": len(keep), "tokens": int(mask.sum()),
            "ratio_outside_clip_frac": clipped}


def bench_venv(create: bool) -> Path:
    """`.venv-bench`: sees this interpreter's packages (torch, transformers, evo) plus trl."""
    venv = ROOT / ".venv-bench"
    python = venv / "bin" / "python"
    if not python.exists():
        if not create:
            raise SystemExit(f"{venv} is missing; rerun without --no-create or create it yourself")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
        # Reuse our CPU torch/transformers instead of pulling a second (CUDA) torch.
        Path(site, "evo-bench-parent.pth").write_text(
            f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    check = subprocess.run([str(python), "-c", "import trl"], capture_output=True)
    if check.returncode != 0:
        if not create:
            raise SystemExit(f"trl is not installed in {venv}; run `{python} -m pip install trl`")
        subprocess.run([str(python), "-m", "pip", "install", "-q", "trl"], check=True)
    return python


def _summary(times: list[float]) -> float:
    return statistics.median(times) if times else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="EvoTrainer vs TRL GRPO seconds per step on CPU")
    ap.add_argument("--steps", type=int, default=8, help="timed steps per trainer")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps before timing")
    ap.add_argument("--kl", type=float, default=0.0, help="KL coefficient for both trainers (0: no reference model)")
    ap.add_argument("--modes", default=",".join(MODES), help="grpo.loss_aggregation modes to time ours under")
    ap.add_argument("--no-create", action="store_true", help="do not create .venv-bench or install trl")
    ap.add_argument("--worker", choices=["trl", "check"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "trl":
        print(json.dumps({"trl_times": trl_worker(args.steps, args.warmup, args.kl)}))
        return 0
    if args.worker == "check":
        print(json.dumps({"check": trl_loss_check()}))
        return 0
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise SystemExit(f"--modes: {unknown[0]!r} is not a loss aggregation; use some of {', '.join(MODES)}")

    import torch

    python = bench_venv(not args.no_create)
    print(f"batch: {PROMPTS} prompts x {GENERATIONS} generations, <= {MAX_NEW_TOKENS} new tokens; "
          f"{args.steps} timed steps after {args.warmup} warm-up; kl {args.kl}; torch threads {torch.get_num_threads()}")
    ours = {mode: bench_ours(args.steps, args.warmup, args.kl, mode) for mode in modes}
    bare = bench_bare(args.steps, args.warmup)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false")

    def worker(*extra: str) -> dict:
        proc = subprocess.run([str(python), __file__, *extra], capture_output=True, text=True, env=env, cwd=ROOT)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-4000:])
            raise SystemExit(f"the TRL worker {' '.join(extra[:2])} failed (see above)")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    trl = worker("--worker", "trl", "--steps", str(args.steps), "--warmup", str(args.warmup), "--kl", str(args.kl))["trl_times"]
    check = worker("--worker", "check")["check"]

    trl_s, bare_s = _summary(trl), _summary(bare)
    ours_s = {mode: _summary(times) for mode, times in ours.items()}
    speedup = {mode: trl_s / s for mode, s in ours_s.items()}
    base = "paper" if "paper" in ours_s else modes[0]
    overhead = ours_s[base] / bare_s - 1.0
    print(f"{'trainer':<34}{'s/step (median)':>18}{'min':>9}{'max':>9}{'vs TRL':>9}")
    for mode, times in ours.items():
        print(f"{'evo ' + mode:<34}{_summary(times):>18.4f}{min(times):>9.4f}{max(times):>9.4f}{speedup[mode]:>8.2f}x")
    for name, times in (("trl (loss_type dapo)", trl), ("bare", bare)):
        print(f"{name:<34}{_summary(times):>18.4f}{min(times):>9.4f}{max(times):>9.4f}")
    print(f"speedup vs TRL GRPOTrainer: {min(speedup.values()):.2f}x at worst over {len(modes)} modes (goal >= {GOAL_SPEEDUP}x)")
    print(f"harness overhead vs bare generate+forward+backward ({base}): {overhead * 100:.1f}% (goal <= {GOAL_OVERHEAD * 100:.0f}%)")
    print(f"loss check on one batch ({check['trajectories']} trajectories, {check['tokens']} tokens, "
          f"{check['ratio_outside_clip_frac']:.0%} of ratios outside the clip, KL {CHECK_KL}): ours token-mean "
          f"{check['ours_loss']:.9f} vs TRL dapo {check['trl_loss']:.9f}, |diff| {check['loss_abs_diff']:.2e} "
          f"(goal <= {GOAL_LOSS_DIFF:g}); gradients differ by at most {check['grad_max_abs_diff']:.2e}")
    loss_ok = check["loss_abs_diff"] <= GOAL_LOSS_DIFF
    result = {
        "evo_s_per_step": {m: round(s, 4) for m, s in ours_s.items()}, "trl_s_per_step": round(trl_s, 4),
        "bare_s_per_step": round(bare_s, 4), "speedup_vs_trl": {m: round(x, 3) for m, x in speedup.items()},
        "overhead_vs_bare": round(overhead, 3), "loss_check": check,
        "goal_speedup": GOAL_SPEEDUP, "goal_overhead": GOAL_OVERHEAD, "goal_loss_abs_diff": GOAL_LOSS_DIFF,
        "batch": {"prompts": PROMPTS, "generations": GENERATIONS, "max_new_tokens": MAX_NEW_TOKENS},
        "steps": args.steps, "kl_coef": args.kl,
        "met": bool(min(speedup.values()) >= GOAL_SPEEDUP and overhead <= GOAL_OVERHEAD and loss_ok),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
