"""Behavior layer: tool-use rates and which tools are called.

Share of trajectories with at least one tool call, calls per trajectory, each
tool's share of all calls (`behavior/tool_share/<tool>`), for training and
validation; for training also over the first and the last third of the steps
(`behavior/tool_use_frac_first`, `_recent`: a policy learning to avoid its tool); on validation also the mean score with and without tool use (the
paper's Math v8: ~27% of validation samples invoke the Code Interpreter, with
gains concentrated there).

Findings:
- behavior.no_tool_use (warning): a multi-turn domain where fewer than
  NO_TOOL_WARN of training (or validation) episodes call any tool.
"""

import numpy as np

from evo.harness import kit

LAYER = "behavior"
NO_TOOL_WARN = 0.05


def _tool_shares(table):
    import pyarrow.compute as pc

    counts = pc.value_counts(pc.list_flatten(table.column("tools")))
    names, n = counts.field("values").to_pylist(), counts.field("counts").to_pylist()
    total = sum(n)
    return {str(name): c / total for name, c in zip(names, n)} if total else {}


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
        if multi and metrics[f"{prefix}tool_use_frac"] < NO_TOOL_WARN and not findings:
            findings.append(kit.finding(
                "behavior.no_tool_use", "warning",
                f"only {metrics[prefix + 'tool_use_frac']:.0%} of {where} episodes call any tool in a multi-turn domain",
                rows=kit.rows_where(table.column(ids_col), ~used), values={"tool_use_frac": metrics[prefix + "tool_use_frac"]}))
    return {"metrics": metrics, "findings": findings}
