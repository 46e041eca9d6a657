"""Behavior layer: response length percentiles (p50 / p90 / p99) against the budget.

Lengths are policy-produced tokens (`num_tokens`) of training rollouts
(`behavior/length_p50`...) and validation responses (`behavior/eval_length_p50`...).
The budget is the recipe's `rollout.max_total_tokens` for multi-turn episodes
when set, else `rollout.max_new_tokens`.

Findings:
- behavior.length_near_limit (warning): the median validation (or training)
  response uses at least NEAR_LIMIT of the budget — most answers are squeezed.
"""

import numpy as np

from evo.harness import kit

LAYER = "behavior"
NEAR_LIMIT = 0.9


def _budget(ctx):
    rollout = (ctx.recipe or {}).get("rollout") or {}
    if kit.is_multi_turn(ctx) and rollout.get("max_total_tokens"):
        return int(rollout["max_total_tokens"])
    return int(rollout["max_new_tokens"]) if rollout.get("max_new_tokens") else None


def analyze(ctx):
    metrics, findings = {}, []
    budget = _budget(ctx)
    for table, prefix, ids_col in ((ctx.rollouts, "behavior/", "traj_id"), (ctx.eval, "behavior/eval_", "task_id")):
        if not kit.has(table, "num_tokens") or table.num_rows == 0:
            continue
        lengths = kit.col(table, "num_tokens", np.int64)
        for q, v in kit.percentiles(lengths).items():
            metrics[f"{prefix}length_p{q}"] = v
        metrics[f"{prefix}length_mean"] = float(lengths.mean())
        if budget:
            at_limit = lengths >= budget
            metrics[f"{prefix}length_at_limit_frac"] = kit.frac(at_limit)
            p50 = metrics[f"{prefix}length_p50"]
            if p50 >= NEAR_LIMIT * budget and not findings:
                where = "validation" if "eval" in prefix else "training"
                findings.append(kit.finding(
                    "behavior.length_near_limit", "warning",
                    f"median {where} response is {p50:.0f} tokens, {p50 / budget:.0%} of the {budget}-token budget "
                    f"(p90 {metrics[prefix + 'length_p90']:.0f}, p99 {metrics[prefix + 'length_p99']:.0f})",
                    rows=kit.rows_where(table.column(ids_col), at_limit), values={"p50": p50, "budget": budget}))
    if budget:
        metrics["behavior/length_budget"] = budget
    return {"metrics": metrics, "findings": findings}
