"""Behavior layer: tool-use rates and which tools are called.

Share of trajectories with at least one tool call, calls per trajectory, each
tool's share of all calls (`behavior/tool_share/<tool>`), for training and
validation; for training also over the first and the last third of the steps
(`behavior/tool_use_frac_first`, `_recent`: a policy learning to avoid its tool); on validation also the mean score with and without tool use (the
paper's Math v8: ~27% of validation samples invoke the Code Interpreter, with
gains concentrated there).

Where the domain reports the value its tool handed back (`tool_result`, e.g.
calc's last calculator value), also how often the policy is handed the value
and answers something else: `behavior/tool_result_ignored_frac` (of the
training episodes that answered with a tool result in hand, the share whose
answer is not that result), `behavior/eval_tool_result_ignored_frac` and its
split by stratum, and `behavior/tool_result_answered_frac` (the share of
training episodes that answered holding one). A call whose result is then
ignored costs a turn and buys nothing: the policy has learnt to call, not to
use what the call returns. Answer and result are compared as text, stripped of
surrounding blanks: a domain reports both in one normal form.

Findings:
- behavior.no_tool_use (warning): a multi-turn domain where fewer than
  NO_TOOL_WARN of training (or validation) episodes call any tool.
- behavior.tool_result_ignored (warning): more than IGNORED_WARN of the
  training (or validation) episodes that answered holding a tool result, and
  at least MIN_HELD of them, answered something else.
"""

import numpy as np

from evo.harness import kit

LAYER = "behavior"
NO_TOOL_WARN = 0.05
IGNORED_WARN = 0.2  # the tool's value is exact: one answer in five that discards it is a skill not learnt
MIN_HELD = 16  # fewer answered episodes holding a result say little either way


def _tool_shares(table):
    import pyarrow.compute as pc

    counts = pc.value_counts(pc.list_flatten(table.column("tools")))
    names, n = counts.field("values").to_pylist(), counts.field("counts").to_pylist()
    total = sum(n)
    return {str(name): c / total for name, c in zip(names, n)} if total else {}


def _found(findings: list, finding_id: str) -> bool:
    """One finding of each kind: training's where both tables would raise it."""
    return any(f["id"] == finding_id for f in findings)


def _ignored(table):
    """(held, ignored) row masks: the episode answered holding a tool result; and its answer is not it."""
    import pyarrow.compute as pc

    if not (kit.has(table, "tool_result") and kit.has(table, "answer")):
        return None
    held = kit.nonempty(table, "tool_result") & kit.nonempty(table, "answer")
    same = pc.equal(pc.utf8_trim_whitespace(table.column("answer")), pc.utf8_trim_whitespace(table.column("tool_result")))
    return held, held & ~pc.fill_null(same, False).to_numpy(zero_copy_only=False)


def _tool_result_use(table, prefix: str, ids_col: str, where: str, metrics: dict, findings: list) -> None:
    """The ignored-result share of one table (training or validation), and its finding (the first table's)."""
    masks = _ignored(table)
    if masks is None or not masks[0].any():
        return
    held, ignored = masks
    share = float(ignored.sum() / held.sum())
    metrics[f"{prefix}tool_result_ignored_frac"] = share
    strata = kit.by_stratum(kit.col(table, "stratum")[held], ignored[held]) if kit.has(table, "stratum") else {}
    if prefix == "behavior/":
        metrics["behavior/tool_result_answered_frac"] = kit.frac(held)
    else:
        for stratum, value in strata.items():
            metrics[kit.metric_key("behavior/eval_tool_result_ignored_frac", stratum)] = value
    if share > IGNORED_WARN and held.sum() >= MIN_HELD and not _found(findings, "behavior.tool_result_ignored"):
        worst = max(strata.items(), key=lambda kv: kv[1]) if len(strata) > 1 else None
        detail = f" ({worst[0]} stratum: {worst[1]:.0%})" if worst else ""
        findings.append(kit.finding(
            "behavior.tool_result_ignored", "warning",
            f"{share:.0%} of {where} episodes that answered holding a tool result answered something else{detail}",
            rows=kit.rows_where(table.column(ids_col), ignored),
            values={"tool_result_ignored_frac": share, "answered_holding_result": int(held.sum())}))


def analyze(ctx):
    metrics, findings = {}, []
    multi = kit.is_multi_turn(ctx)
    for table, prefix, ids_col, where in ((ctx.rollouts, "behavior/", "traj_id", "training"),
                                          (ctx.eval, "behavior/eval_", "task_id", "validation")):
        if not kit.has(table, "tool_calls") or table.num_rows == 0:
            continue
        calls = kit.col(table, "tool_calls", np.int64)
        used = calls > 0
        metrics[f"{prefix}tool_use_frac"] = kit.frac(used)
        g = kit.groups(ctx) if prefix == "behavior/" else None
        if g is not None:  # did training teach the tool, or teach the policy to avoid it?
            metrics["behavior/tool_use_frac_first"] = kit.frac(used[g.broadcast(g.first())])
            metrics["behavior/tool_use_frac_recent"] = kit.frac(used[g.broadcast(g.recent())])
        metrics[f"{prefix}tool_calls_mean"] = float(calls.mean())
        if kit.has(table, "tools"):
            for name, share in _tool_shares(table).items():
                metrics[kit.metric_key(f"{prefix}tool_share", name)] = share
        if prefix == "behavior/eval_" and kit.has(table, "score"):
            score = kit.col(table, "score", np.float64)
            if used.any():
                metrics["behavior/eval_score_with_tools"] = float(score[used].mean())
            if (~used).any():
                metrics["behavior/eval_score_without_tools"] = float(score[~used].mean())
        if multi and metrics[f"{prefix}tool_use_frac"] < NO_TOOL_WARN and not _found(findings, "behavior.no_tool_use"):
            findings.append(kit.finding(
                "behavior.no_tool_use", "warning",
                f"only {metrics[prefix + 'tool_use_frac']:.0%} of {where} episodes call any tool in a multi-turn domain",
                rows=kit.rows_where(table.column(ids_col), ~used), values={"tool_use_frac": metrics[prefix + "tool_use_frac"]}))
        _tool_result_use(table, prefix, ids_col, where, metrics, findings)
    return {"metrics": metrics, "findings": findings}
