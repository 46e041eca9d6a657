"""Behavior layer: turn-count distribution of multi-turn episodes.

Mean, p50/p90, max, the share of one-turn episodes and of episodes that hit
the turn limit (`finish_reason == "max_turns"`), for training (overall; mean
and one-turn share also over the recent steps) and validation; and
`tool_cut_off_frac`, the share of the episodes that call a tool that end at the
turn limit. That one tells a limit too short for the tool: under calc's
`max_turns: 1` every call is cut off before it can be answered, the policy
learns to stop calling, and the overall share at the limit stays small. Where
every action is a tool call (patch, swe) it is the share at the limit among
the episodes that acted at all, close to `max_turns_frac` (within 0.01 on four
patch v0s). It is reported only over at least MIN_CALLERS calling episodes: a
policy that all but never calls (two of 2,560 episodes, trying a calculator
that is not offered) gives a share of two episodes, no evidence about the limit.
Single-turn domains report nothing.

Findings:
- behavior.max_turns_hit (warning): at least MAX_TURNS_WARN of recent training
  (or validation) episodes end at the turn limit.
- behavior.tool_cut_off (warning): at least MAX_TURNS_WARN of the training (or
  validation) episodes that call a tool end at the turn limit.
"""

import numpy as np

from evo.harness import kit

LAYER = "behavior"
MAX_TURNS_WARN = 0.25
MIN_CALLERS = 16  # two groups' worth of episodes that call a tool: fewer, and no share at the limit is claimed


def _warn_once(findings, id, message, ids, mask, values):
    """Add warning `id` unless the training table already raised it (validation adds only what training did not)."""
    if not any(f["id"] == id for f in findings):
        findings.append(kit.finding(id, "warning", message, rows=kit.rows_where(ids, mask), values=values))


def analyze(ctx):
    parent = ctx.parent  # a run that collapsed to one turn reads as multi-turn through its parent's episodes
    if not kit.is_multi_turn(ctx, (ctx.rollouts, ctx.eval) + ((parent.rollouts, parent.eval) if parent else ())):
        return kit.empty()
    metrics, findings = {}, []
    for table, prefix, ids_col in ((ctx.rollouts, "behavior/", "traj_id"), (ctx.eval, "behavior/eval_", "task_id")):
        if not kit.has(table, "turns") or table.num_rows == 0:
            continue
        turns = kit.col(table, "turns", np.int64)
        at_limit = kit.text_eq(table, "finish_reason", "max_turns") if kit.has(table, "finish_reason") else np.zeros(len(turns), bool)
        scope = np.ones(len(turns), bool)
        if prefix == "behavior/":
            g = kit.groups(ctx)
            if g is not None:
                scope = g.broadcast(g.recent())
                metrics["behavior/turns_mean_recent"] = float(turns[scope].mean())
                metrics["behavior/one_turn_frac_recent"] = kit.frac(turns[scope] <= 1)
        q = kit.percentiles(turns, (50, 90))
        metrics.update({
            f"{prefix}turns_mean": float(turns.mean()),
            f"{prefix}turns_p50": q[50],
            f"{prefix}turns_p90": q[90],
            f"{prefix}turns_max": int(turns.max()),
            f"{prefix}one_turn_frac": kit.frac(turns <= 1),
            f"{prefix}max_turns_frac": kit.frac(at_limit),
        })
        ids, training = table.column(ids_col), prefix == "behavior/"
        called = kit.col(table, "tool_calls", np.int64) > 0 if kit.has(table, "tool_calls") else np.zeros(len(turns), bool)
        if called.sum() >= MIN_CALLERS and kit.has(table, "finish_reason"):  # out of turns unfinished (in calc: calls never answered)
            cut = kit.frac(at_limit[called])
            metrics[f"{prefix}tool_cut_off_frac"] = cut
            if cut >= MAX_TURNS_WARN:
                _warn_once(findings, "behavior.tool_cut_off",
                           f"{cut:.0%} of the {'training' if training else 'validation'} episodes that call a tool "
                           "end at the turn limit without finishing", ids, at_limit & called, {"tool_cut_off_frac": cut})
        rate = kit.frac(at_limit[scope])
        if rate >= MAX_TURNS_WARN:
            _warn_once(findings, "behavior.max_turns_hit",
                       f"{rate:.0%} of {'recent training' if training else 'validation'} episodes end at the turn limit "
                       f"(mean {turns[scope].mean():.1f} turns)", ids, at_limit & scope, {"max_turns_frac": rate})
    return {"metrics": metrics, "findings": findings}
