"""What one GRPO step trains: prompt batches sampled, scored, filtered, weighted.

`StepSampler.sample` is the first half of `Trainer.run_step`:

1. **Generate** the step's prompt batch (`prompts_per_step` tasks, seeded by
   recipe seed and schedule step) on this rank's shard of its groups; score
   every trajectory (the domain's components, `reward.model_judge` where set),
   combine the reward terms and run the filters (`evo.train.filters`).
2. **Refill** (`filters.std_group.refill`, DAPO's dynamic sampling): while the
   step holds fewer than `prompts_per_step` live groups (every rank's, summed)
   and fewer than `max_generation_batches` batches were sampled, sample another
   batch of fresh prompts (group ids continue: batch b holds groups
   b * prompts_per_step + i). Live groups beyond `prompts_per_step` (in group-id
   order) are dropped with the reason `refill: ...`; a step that reaches the cap
   first trains on what it has and says so (`refill_capped`). Everything a
   batch draws is derived from (seed, schedule step, batch), so a step redone
   after a crash, mid-refill or not, samples exactly the same batches.
3. **SNR filter** (`filters.snr`) over the step's groups, ranked across ranks.
4. **Advantages** (group-normalised, zero-spread groups exactly 0 at the filters'
   tolerance, scaled by the SNR filter's loss scaling) and **trajectory weights**
   of `grpo.loss_aggregation`, normalised by the counts of every rank.

Every trajectory sampled, in every batch, is returned with its decision, so the
rollout record shows all of them.
"""

from __future__ import annotations

import random
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from evo.recipe_spec import RecipeSpec
from evo.train.filters import (
    Decision,
    TrajectoryFlags,
    apply_filters,
    refill_reason,
    snr_decisions,
    snr_inputs,
    snr_loss_scale,
)

# A step's groups fall into segments: group i of a generation batch into i mod EXACT_WORLD, the rank that samples it
# when that many ranks run. One process's micro-batches never span two segments (`evo.train.forward.micro_batches`),
# so it computes the same ones as each rank of such a run.
EXACT_WORLD = 2


@dataclass
class StepBatch:
    trajs: list  # every trajectory this rank sampled in the step, in every generation batch
    rewards: list[float]  # (N,)
    decisions: list[Decision]  # (N,)
    advantages: torch.Tensor  # (N,)
    weights: torch.Tensor  # (N,)
    generation_batches: int
    live_groups: int  # |G*| of the trained batch, every rank
    refill_capped: bool  # refill stopped at max_generation_batches short of prompts_per_step live groups
    snr: dict | None  # {"kept": groups kept, "ranked": groups it saw, "loss_scale": factor on advantages}
    generate_s: float


def batch_tasks(tasks: list, seed: int, schedule: int, count: int, batch: int, used: set) -> list:
    """The prompts of generation batch `batch` of schedule step `schedule`.

    Batch 0 is the step's usual draw (`run.pick_tasks`); later batches draw, with
    their own seed, from the tasks the step has not used yet (from all tasks
    when too few are left).
    """
    from evo.train.run import pick_tasks

    if batch == 0:
        return pick_tasks(tasks, seed, schedule, count)
    fresh = [t for t in tasks if t.id not in used]
    pool = fresh if len(fresh) >= count else tasks
    return random.Random(f"evo-train-{seed}-{schedule}-batch-{batch}").sample(pool, min(count, len(pool)))


class StepSampler:
    """Builds each step's StepBatch for one rank of a run (the recipe, domain, filters and judge fixed at start)."""

    def __init__(self, spec: RecipeSpec, env, components: list[str], terms: list[dict], filter_cfg, limits,
                 train_tasks: list, ranks, judge=None, token_budget: int | None = None):
        self.spec, self.env, self.components, self.terms = spec, env, components, terms
        self.cfg, self.limits, self.tasks, self.ranks, self.judge = filter_cfg, limits, train_tasks, ranks, judge
        self.token_budget = token_budget

    # -- one generation batch -----------------------------------------------------------------------
    def _score(self, trajs: list) -> list[float]:
        from evo.train.rewards import total_reward

        for t in trajs:  # a domain that omits a component at an early stop scores it 0
            for c in self.components:
                t.components.setdefault(c, 0.0)
        if self.judge is not None and trajs:
            from evo.train.judge_model import COMPONENT

            verdicts = self.judge.score([(t.prompt, t.text) for t in trajs],
                                        labels=[f"{t.task_id} (group {t.group}, sample {t.sample})" for t in trajs])
            for t, v in zip(trajs, verdicts):
                t.components[COMPONENT] = v.value
                t.info["judge_status"] = v.status
        return [total_reward(t.components, self.terms) for t in trajs]

    def _filter(self, trajs: list, rewards: list[float], groups: list[int]) -> list[Decision]:
        """The filters' decision for every trajectory (groups: the global ids of this rank's groups)."""
        local = {gid: k for k, gid in enumerate(groups)}
        by_group: list[list[int]] = [[] for _ in groups]
        for i, t in enumerate(trajs):
            by_group[local[t.group]].append(i)
        flags = [[TrajectoryFlags(truncated=trajs[i].truncated, num_tokens=sum(trajs[i].response_mask),
                                  tokens=[tok for tok, m in zip(trajs[i].response_ids, trajs[i].response_mask) if m],
                                  finish_reason=trajs[i].finish_reason, text=trajs[i].text) for i in idx]
                 for idx in by_group]
        per_group = apply_filters([[rewards[i] for i in idx] for idx in by_group],
                                  {c: [[trajs[i].components[c] for i in idx] for idx in by_group]
                                   for c in self.components}, flags, self.cfg)
        decisions: list = [None] * len(trajs)
        for idx, ds in zip(by_group, per_group):
            for i, d in zip(idx, ds):
                decisions[i] = d
            failed = [trajs[i].info["judge_status"] for i in idx if trajs[i].info.get("judge_status", "").startswith("error")]
            if failed and self.judge.on_error == "skip_group":
                why = failed[0].removeprefix("error: ").split(";")[0]
                self._drop(decisions, idx, f"model_judge: {why} (on_error skip_group)")
        return decisions

    def _generate(self, schedule: int, batch: int, used: set, policy, generating):
        from evo.train.rollout import rollout
        from evo.train.run import generation_seed

        g = self.spec.rollout
        per_batch, seed = g.prompts_per_step, self.spec.seed
        tasks = batch_tasks(self.tasks, seed, schedule, per_batch, batch, used)
        used.update(t.id for t in tasks)
        mine = self.ranks.shard(len(tasks))  # this rank's groups of the batch
        groups = [batch * per_batch + i for i in mine]  # their ids in the whole step
        with generating():
            trajs = rollout(self.env, [tasks[i] for i in mine], policy, g.num_generations, self.limits,
                            seed=generation_seed(seed, schedule) + 7919 * batch, group_ids=groups)
        for t in trajs:  # the record's provenance, whichever rank later trains it (`evo.train.balance`)
            t.info["generation_batch"], t.info["rank"] = batch, self.ranks.rank
            t.info["segment"] = (t.group - batch * per_batch) % EXACT_WORLD  # its rank in a run of EXACT_WORLD
        return trajs, groups

    # -- the step -----------------------------------------------------------------------------------
    def sample(self, schedule: int, policy, generating=nullcontext) -> StepBatch:
        """Sample, score, filter and weight schedule step `schedule` on this rank (see the module docstring)."""
        wanted = self.spec.rollout.prompts_per_step
        cap = self.cfg.generation_batches
        trajs, rewards, decisions, used = [], [], [], set()
        rows: dict[int, list[int]] = {}  # global group id -> its rows in `trajs`
        live = batches = 0
        gen_s = 0.0
        while batches < cap:
            t0 = time.perf_counter()
            part, part_groups = self._generate(schedule, batches, used, policy, generating)
            gen_s += time.perf_counter() - t0
            part_rewards = self._score(part)
            part_decisions = self._filter(part, part_rewards, part_groups)
            for gid in part_groups:
                rows[gid] = []
            for i, t in enumerate(part, start=len(trajs)):
                rows[t.group].append(i)
            trajs += part
            rewards += part_rewards
            decisions += part_decisions
            batches += 1
            if not self.cfg.refill:  # one batch, whatever it holds: no count needed (no collective either)
                break
            mine = sum(self._is_live(rows[gid], decisions, trajs) for gid in part_groups)
            live += int(self.ranks.all_sum([mine])[0])
            if live >= wanted:
                break
        tokens = [sum(t.response_mask) for t in trajs]  # (N,) policy tokens |T_i|
        if self.cfg.refill and live > wanted:
            self._trim(trajs, decisions, rows, batches * wanted, wanted)
        snr = self._snr(trajs, rewards, decisions, rows, batches * wanted) if self.cfg.snr else None
        advantages, weights, counts = self._weights(trajs, rewards, decisions, tokens, snr)
        return StepBatch(trajs, rewards, decisions, advantages, weights, batches, int(counts[0]),
                         bool(self.cfg.refill and live < wanted), snr, gen_s)

    @staticmethod
    def _is_live(group_rows: list[int], decisions, trajs) -> bool:
        """A group that enters the loss: one trajectory kept, not masked, with policy tokens."""
        return any(decisions[i].contributes and sum(trajs[i].response_mask) > 0 for i in group_rows)

    @staticmethod
    def _drop(decisions, group_rows: list[int], reason: str) -> None:
        for i in group_rows:
            d = decisions[i]
            if d.kept:  # rows an earlier filter dropped keep that reason
                d.kept, d.masked, d.in_group_stats, d.reason = False, False, False, reason

    def _trim(self, trajs, decisions, rows: dict, slots: int, wanted: int) -> None:
        """Drop the live groups beyond the first `wanted` (in group-id order, over every rank)."""
        flags = [0.0] * slots
        for gid, group_rows in rows.items():
            flags[gid] = float(self._is_live(group_rows, decisions, trajs))
        flags = self.ranks.all_sum(flags)
        keep = set([gid for gid in range(slots) if flags[gid] > 0][:wanted])
        for gid, group_rows in rows.items():
            if flags[gid] > 0 and gid not in keep:
                self._drop(decisions, group_rows, refill_reason(wanted))

    def _snr(self, trajs, rewards, decisions, rows: dict, slots: int) -> dict:
        """Rank every rank's groups by spread; drop those outside the top_p share, with their reasons."""
        component = self.cfg.snr_component
        values = rewards if component == "total" else [t.components[component] for t in trajs]
        spreads, candidates = [0.0] * slots, [0.0] * slots
        mine = list(rows)
        local = snr_inputs([[values[i] for i in rows[gid]] for gid in mine], [[decisions[i] for i in rows[gid]] for gid in mine])
        for gid, s, c in zip(mine, *local):
            spreads[gid], candidates[gid] = s, float(c)
        both = self.ranks.all_sum(spreads + candidates)  # groups never span ranks: the sum is each group's own
        spreads, candidates = both[:slots], [c > 0 for c in both[slots:]]
        reasons = snr_decisions(spreads, candidates, self.cfg)
        for gid, group_rows in rows.items():
            if reasons[gid]:
                self._drop(decisions, group_rows, reasons[gid])
        ranked = sum(candidates)
        kept = sum(1 for c, r in zip(candidates, reasons) if c and not r)
        return {"kept": kept, "ranked": ranked, "loss_scale": snr_loss_scale(kept, ranked, self.cfg.snr_loss_scaling)}

    def _weights(self, trajs, rewards, decisions, tokens, snr):
        from evo.train.objective import batch_counts, group_advantages, trajectory_weights

        grpo = self.spec.grpo
        groups = torch.tensor([t.group for t in trajs], dtype=torch.long)  # (N,)
        in_stats = torch.tensor([d.in_group_stats for d in decisions], dtype=torch.bool)  # (N,)
        adv = group_advantages(torch.tensor(rewards, dtype=torch.float64), groups, in_stats,
                               scale_by_std=grpo.scale_advantage_by_std, std=grpo.advantage_std,
                               zero_spread=self.cfg.std_epsilon)  # (N,)
        if snr is not None and snr["loss_scale"] != 1.0:
            adv = adv * snr["loss_scale"]  # (N,)
        contributes = torch.tensor([d.contributes and n > 0 for d, n in zip(decisions, tokens)],
                                   dtype=torch.bool)  # (N,)
        n_tokens = torch.tensor(tokens, dtype=torch.float64)  # (N,)
        counts = self.ranks.all_sum(batch_counts(groups, contributes, n_tokens))  # |G*|, |N*|, Σ|T| of every rank
        weights = trajectory_weights(groups, contributes, mode=grpo.loss_aggregation, tokens=n_tokens,
                                     counts=counts, token_budget=self.token_budget)  # (N,)
        return adv, weights, counts
