"""Behavior layer: unclosed reasoning blocks (`<think>` without a matching `</think>`).

A response that opens a reasoning block and never closes it produced no
answer; when most unclosed responses are also truncated, the budget is the
cause, not the reasoning (paper B.3: 56.1% unclosed, all near the token limit).

Findings:
- behavior.unclosed_reasoning (warning): at least UNCLOSED_WARN of validation
  (or training) responses leave a block open; reports how many are truncated.
"""

import numpy as np

from evo.harness import kit

LAYER = "behavior"
OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"
UNCLOSED_WARN = 0.10


def _unclosed(table):
    """(rows,) bool: more OPEN_TAGs than CLOSE_TAGs; each tag count is skipped where the tag occurs nowhere."""
    import pyarrow.compute as pc

    text = pc.fill_null(table.column("completion"), "")
    if not kit.text_may_contain(text, [OPEN_TAG]):
        return np.zeros(table.num_rows, dtype=bool)  # a model without reasoning blocks
    if not kit.text_may_contain(text, [CLOSE_TAG]):
        return pc.match_substring(text, OPEN_TAG).to_numpy(zero_copy_only=False)  # nothing is ever closed
    opened = pc.count_substring(text, OPEN_TAG).to_numpy(zero_copy_only=False)
    closed = pc.count_substring(text, CLOSE_TAG).to_numpy(zero_copy_only=False)
    return opened > closed  # (rows,)


def analyze(ctx):
    metrics, findings = {}, []
    for table, prefix, ids_col, where in ((ctx.eval, "behavior/eval_", "task_id", "validation"),
                                          (ctx.rollouts, "behavior/", "traj_id", "training")):
        if not kit.has(table, "completion") or table.num_rows == 0:
            continue
        unclosed = _unclosed(table)
        rate = kit.frac(unclosed)
        metrics[f"{prefix}unclosed_reasoning_frac"] = rate
        truncated_share = None
        if kit.has(table, "truncated") and unclosed.any():
            truncated_share = float(kit.col(table, "truncated", bool)[unclosed].mean())
            metrics[f"{prefix}unclosed_truncated_frac"] = truncated_share
        if rate >= UNCLOSED_WARN and not findings:
            coupling = f"; {truncated_share:.0%} of them are truncated" if truncated_share is not None else ""
            findings.append(kit.finding(
                "behavior.unclosed_reasoning", "warning",
                f"{rate:.0%} of {where} responses open {OPEN_TAG} without closing it{coupling}",
                rows=kit.rows_where(table.column(ids_col), unclosed),
                values={"unclosed_frac": rate, "truncated_share": truncated_share}))
    return {"metrics": metrics, "findings": findings}
