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

The first `--warmup` steps of each are not timed. Goals: ours >= 1.5x faster per
step than TRL, overhead (ours / bare - 1) <= 25%. The last line is JSON.

    .venv/bin/python bench/grpo_vs_trl.py [--steps 8] [--warmup 2]
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
GOAL_SPEEDUP, GOAL_OVERHEAD = 1.5, 0.25


def _recipe(steps: int, kl: float) -> dict:
    from evo.recipe import normalize_recipe

    return normalize_recipe({
        "name": "bench", "seed": SEED, "domain": {"name": "arithmetic"}, "model": {"name": "builtin:tiny-char"},
        "rollout": {"prompts_per_step": PROMPTS, "num_generations": GENERATIONS, "max_new_tokens": MAX_NEW_TOKENS},
        "grpo": {"steps": steps, "learning_rate": LR, "kl_coef": kl, "micro_batch_size": PROMPTS * GENERATIONS},
    })


def _timed(fn, steps: int, warmup: int) -> list[float]:
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        fn(i)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def bench_ours(steps: int, warmup: int, kl: float) -> list[float]:
    from evo.recipe import recipe_hash
    from evo.train.trainer import Trainer

    recipe = _recipe(steps + warmup, kl)
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
    ap.add_argument("--no-create", action="store_true", help="do not create .venv-bench or install trl")
    ap.add_argument("--worker", choices=["trl"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "trl":
        print(json.dumps({"trl_times": trl_worker(args.steps, args.warmup, args.kl)}))
        return 0

    import torch

    python = bench_venv(not args.no_create)
    print(f"batch: {PROMPTS} prompts x {GENERATIONS} generations, <= {MAX_NEW_TOKENS} new tokens; "
          f"{args.steps} timed steps after {args.warmup} warm-up; kl {args.kl}; torch threads {torch.get_num_threads()}")
    ours = bench_ours(args.steps, args.warmup, args.kl)
    bare = bench_bare(args.steps, args.warmup)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([str(python), __file__, "--worker", "trl", "--steps", str(args.steps),
                           "--warmup", str(args.warmup), "--kl", str(args.kl)], capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit("the TRL run failed (see above)")
    trl = json.loads(proc.stdout.strip().splitlines()[-1])["trl_times"]

    ours_s, bare_s, trl_s = _summary(ours), _summary(bare), _summary(trl)
    speedup = trl_s / ours_s
    overhead = ours_s / bare_s - 1.0
    print(f"{'trainer':<10}{'s/step (median)':>18}{'min':>9}{'max':>9}")
    for name, times in (("evo", ours), ("trl", trl), ("bare", bare)):
        print(f"{name:<10}{_summary(times):>18.4f}{min(times):>9.4f}{max(times):>9.4f}")
    print(f"speedup vs TRL GRPOTrainer: {speedup:.2f}x (goal >= {GOAL_SPEEDUP}x)")
    print(f"harness overhead vs bare generate+forward+backward: {overhead * 100:.1f}% (goal <= {GOAL_OVERHEAD * 100:.0f}%)")
    result = {
        "evo_s_per_step": round(ours_s, 4), "trl_s_per_step": round(trl_s, 4), "bare_s_per_step": round(bare_s, 4),
        "speedup_vs_trl": round(speedup, 3), "overhead_vs_bare": round(overhead, 3),
        "goal_speedup": GOAL_SPEEDUP, "goal_overhead": GOAL_OVERHEAD,
        "batch": {"prompts": PROMPTS, "generations": GENERATIONS, "max_new_tokens": MAX_NEW_TOKENS},
        "steps": args.steps, "kl_coef": args.kl, "met": bool(speedup >= GOAL_SPEEDUP and overhead <= GOAL_OVERHEAD),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
