"""Behavior layer: abandonment and idle failure in multi-turn episodes.

- *Abandonment*: the policy ended the episode itself (finish_reason eos/stop)
  without a final answer and without calling a submit tool (SUBMIT_TOOLS).
- *Idle turns*: turns without a valid action, as the domain counts them (the
  `idle_turns` column); where a domain keeps no count, turns without a tool
  call (turns - tool_calls). The fallback would call a final `answer N` turn
  idle, which is why the domain's own count comes first.
- *Idle failure*: the episode ran out (turn or token limit) with no answer and
  at least kit.IDLE_SHARE of its turns idle — the policy talked instead of acting.

These are distinct from the Echo Trap (long and repetitive but rewarded); the
paper's SWE filter separates all three. Single-turn domains report nothing.

Findings:
- behavior.abandonment (warning): at least ABANDON_WARN of training (or validation) episodes.
- behavior.idle_failure (warning): at least IDLE_WARN of training (or validation) episodes.
"""

import numpy as np

from evo.harness import kit

LAYER = "behavior"
SUBMIT_TOOLS = ("submit", "finish", "answer")
ABANDON_WARN = 0.2
IDLE_WARN = 0.2


def _submitted(table, rows):
    """(table rows,) bool: the episode called a submit tool; exact at `rows`, may read False elsewhere.

    Flattening a million tool lists costs more than the rest of this analyzer, and
    the answer only matters at `rows`: unanswered episodes that ended or ran out idle.
    """
    import pyarrow as pa

    out = np.zeros(table.num_rows, dtype=bool)
    if not kit.has(table, "tools") or len(rows) == 0:
        return out
    if 2 * len(rows) > table.num_rows:
        return kit.list_contains(table, "tools", SUBMIT_TOOLS)  # most rows: cheaper than gathering them
    tools = table.column("tools").take(pa.array(rows))  # (len(rows),) lists
    out[rows] = kit.list_contains(pa.table({"tools": tools}), "tools", SUBMIT_TOOLS)
    return out


def _modes(table):
    n = table.num_rows
    has_finish = kit.has(table, "finish_reason")
    answered = kit.nonempty(table, "answer") if kit.has(table, "answer") else np.zeros(n, bool)
    turns = np.maximum(kit.col(table, "turns", np.int64), 1) if kit.has(table, "turns") else np.ones(n, np.int64)
    calls = kit.col(table, "tool_calls", np.int64) if kit.has(table, "tool_calls") else np.zeros(n, np.int64)
    truncated = kit.col(table, "truncated", bool) if kit.has(table, "truncated") else np.zeros(n, bool)
    idle = np.maximum(turns - calls, 0)
    if kit.has(table, "idle_turns"):
        counted = table.column("idle_turns").is_valid().to_numpy(zero_copy_only=False)  # (n,) the domain counted
        idle = np.where(counted, np.minimum(kit.col(table, "idle_turns", np.int64), turns), idle)
    ended_itself = kit.text_in(table, "finish_reason", ("eos", "stop")) if has_finish else np.ones(n, bool)
    hit_limit = kit.text_in(table, "finish_reason", ("max_turns", "length")) if has_finish else np.zeros(n, bool)
    ran_out = hit_limit | truncated
    mostly_idle = idle >= kit.IDLE_SHARE * turns
    submitted = _submitted(table, np.flatnonzero(~answered & (ended_itself | (ran_out & mostly_idle))))
    unfinished = ~answered & ~submitted
    abandoned = ended_itself & unfinished
    idle_failure = ran_out & unfinished & mostly_idle
    return abandoned, idle_failure, float(idle.sum() / turns.sum())


def analyze(ctx):
    if not kit.is_multi_turn(ctx):
        return kit.empty()
    metrics, findings = {}, []
    for table, prefix, ids_col, where in ((ctx.rollouts, "behavior/", "traj_id", "training"),
                                          (ctx.eval, "behavior/eval_", "task_id", "validation")):
        if table is None or table.num_rows == 0:
            continue
        abandoned, idle_failure, idle_turn_frac = _modes(table)
        metrics[f"{prefix}abandonment_frac"] = kit.frac(abandoned)
        metrics[f"{prefix}idle_failure_frac"] = kit.frac(idle_failure)
        metrics[f"{prefix}idle_turn_frac"] = idle_turn_frac
        seen = {f["id"] for f in findings}
        if metrics[f"{prefix}abandonment_frac"] >= ABANDON_WARN and "behavior.abandonment" not in seen:
            findings.append(kit.finding(
                "behavior.abandonment", "warning",
                f"{metrics[prefix + 'abandonment_frac']:.0%} of {where} episodes stop without an answer or a submit call",
                rows=kit.rows_where(table.column(ids_col), abandoned), values={"abandonment_frac": metrics[prefix + "abandonment_frac"]}))
        if metrics[f"{prefix}idle_failure_frac"] >= IDLE_WARN and "behavior.idle_failure" not in seen:
            findings.append(kit.finding(
                "behavior.idle_failure", "warning",
                f"{metrics[prefix + 'idle_failure_frac']:.0%} of {where} episodes run out of turns mostly without tool calls "
                f"({idle_turn_frac:.0%} of all turns are idle)",
                rows=kit.rows_where(table.column(ids_col), idle_failure), values={"idle_failure_frac": metrics[prefix + "idle_failure_frac"]}))
    return {"metrics": metrics, "findings": findings}
