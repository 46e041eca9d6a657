"""Behavior layer: truncation rate — responses that hit the token limit.

Reported for validation (eval.parquet: `behavior/truncated_frac`, per stratum)
and training rollouts (`behavior/train_truncated_frac`, recent steps, per
stratum). Truncation turns correct-but-long reasoning into failures; when it
concentrates in a hard stratum the fix is the token budget, not the reward.
In multi-turn domains a trajectory is truncated by either of two limits: a
turn's action reaching `rollout.max_new_tokens`, or the episode's
`rollout.max_total_tokens` running out (finish reason `max_total_tokens`).
`behavior/budget_cut_share` (and `behavior/train_budget_cut_share`) is the
share of truncated trajectories the episode budget cut while no turn's limit
cut any of their actions (column `turns_cut`: the finish reason is only the
last turn's, and an episode whose actions were cut at `max_new_tokens`, then
idled on the error observations until the budget ran out, ended on the budget
though the turn's limit made it idle); where it is most of them, a longer turn
would not have helped. `behavior/budget_cut_idle_share`
(and `train_`) is the share of those budget-cut episodes that idled (at least
half their turns before the cut one without a valid action, the domain's
`idle_turns`): a budget spent on error observations, which more budget only
prolongs. `behavior/truncated_acting_frac` (and `train_`) is the share of all
episodes truncated *without* idling into an episode-budget cut: the truncation a
length limit can be blamed for, which the "length is ample" gates of
std-group-filter and the reward-shaping skills read. Runs recorded before the driver
told the two apart (2026-12-03) call every cut `length` and read 0 here; runs
recorded before `turns_cut` (2026-12-08) tell a turn's cut by the last turn's
finish reason alone.

Findings:
- behavior.truncation (warning): validation truncation, or recent training
  truncation, at least TRUNC_WARN; names the worst stratum, cites the rows.
"""

import numpy as np

from evo.harness import kit

LAYER = "behavior"
TRUNC_WARN = 0.10


def _idled_before_the_cut(table) -> np.ndarray:
    """(rows,) bool: at least IDLE_SHARE of the turns before the last one idle. The action a budget cut short is
    almost always malformed, so it is left out; a domain that counts no idle turns idles nowhere."""
    counted = table.column("idle_turns").is_valid().to_numpy(zero_copy_only=False)
    idle = np.maximum(kit.col(table, "idle_turns", np.float64) - 1.0, 0.0)
    turns = kit.col(table, "turns", np.float64) - 1.0
    return counted & (turns >= 1.0) & (idle >= kit.IDLE_SHARE * turns)


def _turn_cut(table) -> np.ndarray:
    """(rows,) bool: the turn's own limit (`rollout.max_new_tokens`) cut at least one of the episode's actions."""
    if kit.has(table, "turns_cut"):
        return kit.col(table, "turns_cut", np.int64) > 0
    return kit.text_eq(table, "finish_reason", "length")  # recorded before `turns_cut`: the last turn's only


def _rates(table, prefix, metrics):
    truncated = kit.col(table, "truncated", bool)
    metrics[prefix] = kit.frac(truncated)
    idle_cut = np.zeros_like(truncated)
    if truncated.any() and kit.has(table, "finish_reason"):  # which limit: the episode's budget or a turn's
        budget = kit.text_eq(table, "finish_reason", kit.EPISODE_BUDGET) & ~_turn_cut(table)
        metrics[prefix.replace("truncated_frac", "budget_cut_share")] = kit.frac(budget[truncated])
        if budget.any() and kit.has(table, "idle_turns") and kit.has(table, "turns"):
            idled = _idled_before_the_cut(table)
            metrics[prefix.replace("truncated_frac", "budget_cut_idle_share")] = kit.frac(idled[budget])
            idle_cut = truncated & budget & idled
    # Truncation a longer turn or episode could matter to: the episodes a limit cut while they were still acting.
    metrics[prefix.replace("truncated_frac", "truncated_acting_frac")] = kit.frac(truncated & ~idle_cut)
    per = {}
    if kit.has(table, "stratum"):
        per = kit.mean_by(table, "stratum", truncated)
        for stratum, value in per.items():
            metrics[kit.metric_key(prefix, stratum)] = value
    return truncated, per


def analyze(ctx):
    metrics, findings = {}, []
    worst_source = None
    if kit.has(ctx.eval, "truncated") and ctx.eval.num_rows:
        truncated, per = _rates(ctx.eval, "behavior/truncated_frac", metrics)
        if metrics["behavior/truncated_frac"] >= TRUNC_WARN:
            worst_source = ("validation responses", metrics["behavior/truncated_frac"], per, ctx.eval.column("task_id"), truncated)
    table = ctx.rollouts
    if kit.has(table, "truncated") and table.num_rows:
        truncated, per = _rates(table, "behavior/train_truncated_frac", metrics)
        g = kit.groups(ctx)
        recent_rows = g.broadcast(g.recent()) if g is not None else np.ones(table.num_rows, bool)
        metrics["behavior/train_truncated_frac_recent"] = kit.frac(truncated[recent_rows])
        if worst_source is None and metrics["behavior/train_truncated_frac_recent"] >= TRUNC_WARN:
            worst_source = ("recent training rollouts", metrics["behavior/train_truncated_frac_recent"], per,
                            table.column("traj_id"), truncated & recent_rows)
    if worst_source:
        what, rate, per, ids, mask = worst_source
        detail = ""
        if per:
            stratum = max(per, key=per.get)
            detail = f" ({stratum} stratum: {per[stratum]:.0%})" if len(per) > 1 else ""
        findings.append(kit.finding(
            "behavior.truncation", "warning", f"{rate:.0%} of {what} hit the token limit{detail}",
            rows=kit.rows_where(ids, mask), values={"truncated_frac": rate, "per_stratum": per}))
    return {"metrics": metrics, "findings": findings}
