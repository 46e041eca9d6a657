"""Behavior layer: format failures (`reward/format` == 0) and their coupling to truncation.

When most format failures are also truncated, the format gate is measuring the
token budget rather than the policy's formatting (paper B.3: a format-gate
"failure" was truncation in disguise) — raise the budget before touching the
format reward.

Findings:
- behavior.format_truncation_coupling (warning): format failures at least
  FORMAT_WARN of responses and at least COUPLING_WARN of them truncated.
- behavior.format_failures (warning): format failures at least FORMAT_WARN and
  not mostly truncated.
"""

import numpy as np

from evo.harness import kit

LAYER = "behavior"
FORMAT_WARN = 0.10
COUPLING_WARN = 0.5


def analyze(ctx):
    metrics, findings = {}, []
    for table, prefix, ids_col, where in ((ctx.eval, "behavior/eval_", "task_id", "validation"),
                                          (ctx.rollouts, "behavior/", "traj_id", "training")):
        if not kit.has(table, "reward/format") or table.num_rows == 0:
            continue
        failed = kit.col(table, "reward/format", np.float64) <= 0
        rate = kit.frac(failed)
        metrics[f"{prefix}format_fail_frac"] = rate
        coupling = None
        if kit.has(table, "truncated") and failed.any():
            truncated = kit.col(table, "truncated", bool)
            coupling = float(truncated[failed].mean())
            metrics[f"{prefix}format_fail_truncated_frac"] = coupling
            metrics[f"{prefix}format_fail_rate_truncated"] = float(failed[truncated].mean()) if truncated.any() else 0.0
            metrics[f"{prefix}format_fail_rate_complete"] = float(failed[~truncated].mean()) if (~truncated).any() else 0.0
        if rate < FORMAT_WARN or findings:
            continue
        rows = kit.rows_where(table.column(ids_col), failed)
        if coupling is not None and coupling >= COUPLING_WARN:
            findings.append(kit.finding(
                "behavior.format_truncation_coupling", "warning",
                f"{rate:.0%} of {where} responses fail the format check and {coupling:.0%} of those are truncated; "
                "raise the token budget before changing the format reward",
                rows=rows, values={"format_fail_frac": rate, "truncated_share": coupling}))
        else:
            findings.append(kit.finding(
                "behavior.format_failures", "warning",
                f"{rate:.0%} of {where} responses fail the format check"
                + (f" ({coupling:.0%} of them truncated)" if coupling is not None else ""),
                rows=rows, values={"format_fail_frac": rate, "truncated_share": coupling}))
    return {"metrics": metrics, "findings": findings}
