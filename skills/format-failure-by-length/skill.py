"""Format failures split by truncation (installed by format-failure-by-length).

A format gate zeroes the reward of any response that does not parse; when the
response was cut off by the generation limit, that zero measures the limit, not
the policy. This reports how many responses fail the format component and what
share of those failures are truncated, so the two causes can be told apart.
"""

import numpy as np

LAYER = "behavior"
THRESHOLD = 0.5  # truncated share of format failures that makes a finding
MIN_FAIL_FRAC = 0.1


def _table(ctx):
    for name in ("eval", "rollouts"):
        table = getattr(ctx, name, None)
        if table is not None and table.num_rows and {"reward/format", "truncated"} <= set(table.column_names):
            return name, table
    return None, None


def analyze(ctx):
    source, table = _table(ctx)
    if table is None:
        return {"metrics": {}, "findings": []}
    fmt = np.asarray(table.column("reward/format").to_pylist(), dtype=float)  # (N,)
    truncated = np.asarray(table.column("truncated").to_pylist(), dtype=bool)  # (N,)
    failed = fmt <= 0
    fail_frac = float(failed.mean())
    truncated_share = float(truncated[failed].mean()) if failed.any() else 0.0
    metrics = {"behavior/format_fail_frac": fail_frac, "behavior/format_fail_truncated_frac": truncated_share}
    if "num_tokens" in table.column_names:
        tokens = np.asarray(table.column("num_tokens").to_pylist(), dtype=float)
        if failed.any():
            metrics["behavior/format_fail_len_p50"] = float(np.median(tokens[failed]))
        if (~failed).any():
            metrics["behavior/format_pass_len_p50"] = float(np.median(tokens[~failed]))
    findings = []
    if fail_frac >= MIN_FAIL_FRAC and truncated_share > THRESHOLD:
        ids = table.column("traj_id").to_pylist() if "traj_id" in table.column_names else [str(i) for i in range(table.num_rows)]
        rows = [ids[i] for i in np.flatnonzero(failed & truncated)[:5]]
        findings.append({
            "id": "behavior.format_truncation_coupling",
            "layer": LAYER,
            "severity": "warning",
            "message": (f"{fail_frac:.0%} of {source} responses fail the format check and {truncated_share:.0%} of "
                        "those failures are truncated: the gate is measuring the generation limit"),
            "evidence": {"rows": rows, "values": {"format_fail_frac": fail_frac,
                                                   "format_fail_truncated_frac": truncated_share, "threshold": THRESHOLD}},
        })
    return {"metrics": metrics, "findings": findings}
