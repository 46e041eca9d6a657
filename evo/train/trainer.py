"""The state of one training run and what a single GRPO step does (used by `evo.train.run`).

A step: tasks → rollout → reward terms → filters → advantages → engine update →
rollouts shard + metrics line; the first half (which prompt batches, what each
trajectory weighs) is `evo.train.step_batch.StepSampler`, with dynamic
sampling, the SNR filter and the loss aggregation's weights. Shards
(`rollouts.parts/step-000012.parquet`) are concatenated into `rollouts.parquet`
at each checkpoint and at the end, so a resumed run can drop the steps it redoes.

Data parallel (`evo.train.distributed`): every rank builds the same Trainer;
in a step each rank rolls out, scores and filters its shard of the step's
groups (group ids are positions in the whole step), the loss is normalised
over every rank's live groups, with `grpo.balance_ranks` whole groups move
between ranks to even out the update's work (`evo.train.balance`), and the
rows reach rank 0, which alone writes the shard, computes the metrics from all
rows (so they are the one-process run's) and writes the checkpoint files. A
rollout row records the `rank` that sampled it.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import torch

from evo.recipe_spec import RecipeSpec
from evo.train.records import (
    append_metrics,
    concat_parquet,
    idle_turns,
    read_metrics,
    rollout_schema,
    tool_result,
    truncate_metrics,
    write_json,
    write_table,
)

PARTS_DIR = "rollouts.parts"


def _contributes(row: dict) -> bool:
    """Whether a rollout row entered the loss: kept, not truncation-masked, with tokens to train on."""
    return bool(row["kept"]) and not row["masked"] and row["num_tokens"] > 0


def _mean(values) -> float:
    """Mean that skips NaN (a statistic not computed for some rows)."""
    values = [float(v) for v in values]
    values = [v for v in values if v == v]
    return float(sum(values) / len(values)) if values else 0.0


class Trainer:
    def __init__(self, recipe: dict, out: Path, *, rhash: str, init_checkpoint=None, version: str = "",
                 resume_from: Path | None = None, resume_state: dict | None = None, step_offset: int = 0):
        from evo.domains import get_environment
        from evo.errors import TrainError
        from evo.train.checkpoint import adopt_optimizer, restore_engine
        from evo.train.cost import episode_token_budget
        from evo.train.distributed import current
        from evo.train.engine import make_engine
        from evo.train.filters import FilterConfig
        from evo.train.judge_model import make_judge
        from evo.train.policy import load_policy
        from evo.train.recipe_check import domain_components
        from evo.train.rewards import check_terms
        from evo.train.rollout import RolloutLimits
        from evo.train.step_batch import StepSampler

        self.recipe, self.out, self.rhash, self.version = recipe, Path(out), rhash, version
        self.spec = spec = RecipeSpec.of(recipe)
        self.ranks = ranks = current()
        prompts = spec.rollout.prompts_per_step
        if prompts < ranks.world:
            raise TrainError(f"recipe.yaml: rollout.prompts_per_step: {prompts} is below the {ranks.world} training "
                             f"ranks; each rank samples whole groups, so set it to at least {ranks.world} "
                             "or train with fewer processes")
        self.env = get_environment(spec.domain.name, spec.domain.options)
        self.judge = make_judge(recipe, self.out)
        self.components = domain_components(self.env, recipe)
        self.terms = spec.reward["terms"]
        check_terms(self.terms, self.components)
        self.filter_cfg = FilterConfig.from_recipe(spec.filters)
        self.filter_cfg.check_std_component(self.components)  # before loading a model, not at the first step
        self.train_tasks = self.env.tasks("train")
        self.limits = RolloutLimits.of(spec.rollout, self.env)
        self.sampler = StepSampler(spec, self.env, self.components, self.terms, self.filter_cfg, self.limits,
                                   self.train_tasks, ranks, self.judge,
                                   episode_token_budget(spec.rollout, int(getattr(self.env, "max_turns", 1) or 1)))
        state = resume_state or {}
        self.step_offset = int(state.get("step_offset", step_offset))  # a resumed run keeps its schedule
        self.init_source = state.get("init_source") or str(init_checkpoint or spec.model.name)
        self.init_checkpoint = state.get("init_checkpoint", str(init_checkpoint) if init_checkpoint else None)
        m = spec.model
        device = str(ranks.device)
        self.policy = load_policy(str(resume_from) if resume_from else self.init_source, dtype=m.dtype,
                                  chat_template=m.chat_template, device=device)
        ref_model = None
        if spec.grpo.kl_coef > 0:
            ref_model = load_policy(self.init_source, dtype=m.dtype, chat_template=m.chat_template,
                                    device=device).model
            ref_model.eval().requires_grad_(False)
        self.engine = make_engine(spec, self.policy.model, ref_model=ref_model, ranks=ranks)
        from evo.train.vllm_backend import make_rollout_policy

        self.rollout_policy = make_rollout_policy(spec.rollout, self.policy,
                                                  str(resume_from) if resume_from else self.init_source, ranks)
        self.start_step = 0
        self.totals = {"tokens_generated": 0, "tokens_trained": 0, "wall_s": 0.0}
        self.resumed_from_step = None
        parts = self.out / PARTS_DIR
        # Where the optimizer's moments came from: the parent's checkpoint, else why it started fresh.
        self.optimizer_from = state.get("optimizer_from")
        if resume_from is None and self.init_checkpoint:
            why = adopt_optimizer(self.init_checkpoint, self.engine)
            self.optimizer_from = {"checkpoint": self.init_checkpoint} if why is None else {"fresh": why}
        if resume_from is not None:
            info = restore_engine(resume_from, self.engine)
            self.start_step = int(info["step"])
            self.totals = {k: info.get("totals", {}).get(k, v) for k, v in self.totals.items()}
            self.resumed_from_step = self.start_step
        elif ranks.main:
            (self.out / "metrics.jsonl").unlink(missing_ok=True)
        if ranks.main:
            truncate_metrics(self.out / "metrics.jsonl", self.start_step)
            if parts.exists():
                for shard in parts.glob("step-*.parquet"):
                    if resume_from is None or int(shard.stem.split("-")[1]) >= self.start_step:
                        shard.unlink()
            parts.mkdir(parents=True, exist_ok=True)
        self.parts = parts
        self.last_metrics: dict = {}

    def _generating(self):
        """Parameters gathered for sampling when this rank samples from the trained model itself (FSDP)."""
        from contextlib import nullcontext

        return self.engine.full_parameters() if self.rollout_policy is self.policy else nullcontext()

    # -- one step -------------------------------------------------------------------------------
    def run_step(self, step: int) -> dict:
        """One GRPO step on this rank's shard; the step's metrics on rank 0 ({} on the others)."""
        from evo.train.balance import rebalance
        from evo.train.forward import build_batch

        t0 = time.perf_counter()
        # The prompts and seeds of this step in the longer schedule.
        sampled = self.sampler.sample(self.step_offset + step, self.rollout_policy, self._generating)
        plan, t_bal = None, time.perf_counter()
        if self.spec.grpo.balance_ranks:
            computed = self.engine.computes(sampled.weights.tolist(), sampled.advantages.tolist())
            sampled, plan = rebalance(sampled, computed, self.ranks, self.spec.grpo.micro_batch_size)
        t_bal = time.perf_counter() - t_bal
        trajs, rewards, decisions, adv = sampled.trajs, sampled.rewards, sampled.decisions, sampled.advantages
        t_gen = sampled.generate_s
        batch = build_batch(trajs, adv.tolist(), sampled.weights.tolist(), self.policy.tokenizer.pad_token_id)
        t1 = time.perf_counter()
        self.engine.set_step(step)
        stats = self.engine.train_step(batch)
        if self.rollout_policy is not self.policy and stats["updates"]:
            self.rollout_policy.sync_weights(self.engine.weights())  # the vLLM twin samples the next step anew
        t_train = time.perf_counter() - t1

        per = stats["per_traj"]
        for i, t in enumerate(trajs):  # prefer the sampler's entropy: known for every row, computed or not
            if t.info.get("entropy_tokens"):
                per["entropy"][i] = t.info["entropy_sum"] / t.info["entropy_tokens"]
        rows = [self._row(step, t, rewards[i], float(adv[i]), d, {k: per[k][i] for k in per})
                for i, (t, d) in enumerate(zip(trajs, decisions))]
        gathered = self.ranks.gather((rows, stats["sync_s"]))
        if not self.ranks.main:
            return {}
        rows = sorted((r for part, _ in gathered for r in part), key=lambda r: (r["group"], r["sample"]))
        # The rank that reaches the synced backward last waits for no one: its time there is the reduction's
        # cost, and the first rank waits that much plus the difference in their shards' work.
        sync = [seconds for _, seconds in gathered]
        write_table(rows, rollout_schema(self.components), self.parts / f"step-{step:06d}.parquet")
        metrics = self._metrics(step, rows, stats, sampled)
        step_s = time.perf_counter() - t0
        self.totals["tokens_generated"] += metrics["gen/tokens"]
        self.totals["tokens_trained"] += sum(r["num_tokens"] for r in rows if _contributes(r)) * stats["updates"]
        self.totals["wall_s"] += step_s
        metrics.update({"time/step_s": step_s, "time/generate_s": t_gen, "time/train_s": t_train,
                        "time/sync_s": min(sync), "time/rank_wait_s": max(sync) - min(sync),
                        "time/balance_s": t_bal, "dist/moved_groups": len(plan.moves) if plan else 0,
                        "dist/balance_gain": plan.gain if plan else 0.0})
        append_metrics(metrics, self.out / "metrics.jsonl")
        self.last_metrics = metrics
        return metrics

    def _metrics(self, step: int, rows: list[dict], stats: dict, sampled) -> dict:
        """The step's metrics from every row of the step (in group order), the engine's stats and the sampler's.

        `policy/clip_frac_*` are token means over the trajectories in the loss
        (verl's and TRL's meaning); `*_traj_mean` the mean of per-trajectory fractions.
        """
        from evo.train.objective import group_spread

        rewards = [r["reward"] for r in rows]
        reward_t = torch.tensor(rewards, dtype=torch.float64)  # (N,)
        spreads = group_spread(reward_t, torch.tensor([r["group"] for r in rows], dtype=torch.long))  # (K,)
        live = [r for r in rows if _contributes(r)] or rows
        lengths = [r["num_tokens"] for r in rows]
        live_tokens = sum(r["num_tokens"] for r in live)

        def token_mean(key: str) -> float:
            return sum(r[key] * r["num_tokens"] for r in live) / live_tokens if live_tokens else 0.0

        extra = {}
        if self.filter_cfg.refill:
            extra["signal/refill_capped"] = int(sampled.refill_capped)
        if sampled.snr is not None:
            extra["signal/snr_kept_ratio"] = sampled.snr["kept"] / sampled.snr["ranked"] if sampled.snr["ranked"] else 0.0
            extra["signal/snr_loss_scale"] = sampled.snr["loss_scale"]
        if self.judge is not None:
            statuses = [r["judge_status"] for r in rows]
            extra["reward/judge_error_frac"] = _mean(s.startswith("error") for s in statuses)
            extra["reward/judge_cached_frac"] = _mean(s == "cached" for s in statuses)
        return {
            "step": step,
            "reward/mean": _mean(rewards),
            "reward/std": float(reward_t.std(unbiased=False)) if rows else 0.0,
            **{f"reward/{c}_mean": _mean(r[f"reward/{c}"] for r in rows) for c in self.components},
            "signal/dead_group_ratio": float((spreads < 1e-6).double().mean()) if len(spreads) else 0.0,
            "signal/reward_std": float(spreads.mean()) if len(spreads) else 0.0,
            "signal/kept_frac": _mean(r["kept"] for r in rows),
            "signal/masked_frac": _mean(r["masked"] for r in rows),
            "signal/advantage_abs_mean": _mean(abs(r["advantage"]) for r in rows),
            "policy/loss": stats["loss"],
            "policy/kl": _mean(r["kl"] for r in live),
            "policy/entropy": _mean(r["entropy"] for r in live),
            "policy/clip_frac_low": token_mean("clip_frac_low"),
            "policy/clip_frac_high": token_mean("clip_frac_high"),
            "policy/clip_frac_low_traj_mean": _mean(r["clip_frac_low"] for r in live),
            "policy/clip_frac_high_traj_mean": _mean(r["clip_frac_high"] for r in live),
            "policy/grad_norm": stats["grad_norm"],
            "policy/lr": stats["lr"],
            "policy/updates": stats["updates"],
            "gen/length_mean": _mean(lengths),
            "gen/length_max": max(lengths, default=0),
            "gen/truncated_frac": _mean(r["truncated"] for r in rows),
            "gen/turns_mean": _mean(r["turns"] for r in rows),
            "gen/tool_calls_mean": _mean(r["tool_calls"] for r in rows),
            "gen/tokens": sum(lengths),
            "signal/generation_batches": sampled.generation_batches,
            "signal/live_groups": sampled.live_groups,
            **extra,
        }

    def _row(self, step: int, t, reward: float, advantage: float, d, per: dict) -> dict:
        from evo.train.rollout import transcript_json

        row = {
            "traj_id": f"s{step}-g{t.group}-{t.sample}", "version": self.version, "step": step,
            "group": t.group, "sample": t.sample, "task_id": t.task_id, "stratum": t.stratum,
            "prompt": t.prompt, "completion": t.text,
            "completion_tokens": [int(x) for x in t.response_ids],
            "num_tokens": int(sum(t.response_mask)), "finish_reason": t.finish_reason,
            "truncated": bool(t.truncated), "turns": int(t.turns), "tool_calls": int(t.tool_calls),
            "tools": list(t.info.get("tools", [])), "idle_turns": idle_turns(t.info), "tool_result": tool_result(t.info),
            "turns_cut": int(t.turns_cut),
            "answer": str(t.info.get("answer", "") or ""),
            "transcript": transcript_json(t), "reward": float(reward),
            "advantage": advantage, "kept": bool(d.kept), "filter_reason": d.reason, "masked": bool(d.masked),
            "kl": float(per["kl"]), "entropy": float(per["entropy"]),
            "clip_frac_low": float(per["clip_frac_low"]), "clip_frac_high": float(per["clip_frac_high"]),
            "rank": int(t.info["rank"]), "generation_batch": int(t.info.get("generation_batch", 0)),
            "judge_status": str(t.info.get("judge_status", "")),
        }
        for c in self.components:
            row[f"reward/{c}"] = float(t.components.get(c, 0.0))
        return row

    # -- checkpoints and the end ----------------------------------------------------------------------
    def _merge_rollouts(self) -> None:
        shards = sorted(self.parts.glob("step-*.parquet"))
        concat_parquet(shards, rollout_schema(self.components), self.out / "rollouts.parquet")

    def save(self, done_steps: int, finished: bool = False) -> Path:
        from evo.train.checkpoint import save_checkpoint

        info = {"step": int(done_steps), "recipe_hash": self.rhash, "init_source": self.init_source,
                "init_checkpoint": self.init_checkpoint, "finished": finished, "version": self.version,
                "totals": dict(self.totals), "step_offset": self.step_offset, "optimizer_from": self.optimizer_from}
        folder = save_checkpoint(self.out / "checkpoint", self.policy, self.engine, info)
        if self.ranks.main:
            self._merge_rollouts()
        return folder

    def finish(self) -> dict:
        """Final checkpoint, rollouts.parquet, evaluation, then summary.json (last); the summary on every rank."""
        import shutil

        from evo.train.evaluate import evaluate

        steps = self.spec.grpo.steps
        folder = self.save(steps, finished=True)
        self.policy.name = str(folder)  # eval.json names what it evaluated: this run's checkpoint
        with self.engine.full_parameters():  # the trained HF model evaluates (its tasks sharded over ranks)
            ev = evaluate(self.policy, self.recipe, self.out)
        judge = None
        if self.judge is not None:  # this process's judge traffic (since a resume), every rank's summed
            judge = self.judge.summary()
            keys = ("calls", "cache_hits", "errors")
            judge.update(zip(keys, (int(v) for v in self.ranks.all_sum([judge[k] for k in keys]))))
        if not self.ranks.main:
            return self.ranks.broadcast(None)
        if not self.last_metrics:
            done = read_metrics(self.out / "metrics.jsonl")
            self.last_metrics = done[-1] if done else {}
        summary = {
            "recipe_hash": self.rhash,
            "model": self.spec.model.name,
            "init_checkpoint": self.init_checkpoint,
            "version": self.version,
            "steps": steps,
            "tokens_generated": int(self.totals["tokens_generated"]),
            "tokens_trained": int(self.totals["tokens_trained"]),
            "wall_s": round(float(self.totals["wall_s"]), 3),
            "resumed_from_step": self.resumed_from_step,
            "step_offset": self.step_offset,
            "optimizer_from": self.optimizer_from,
            "final": copy.deepcopy(self.last_metrics),
            "eval": ev,
        }
        if judge is not None:
            summary["model_judge"] = judge
        write_json(summary, self.out / "summary.json")
        shutil.rmtree(self.parts, ignore_errors=True)
        return self.ranks.broadcast(summary)
