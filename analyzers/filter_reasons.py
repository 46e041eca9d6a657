"""Signal layer: why trajectories were dropped by filters (counts by reason).

`filter_reason` is "" for kept rows, else `<filter>: <detail>` (e.g.
`std_group: spread 0 < 1e-06`, `anomaly: truncated`). Reasons are keyed by the
filter and the first word of the detail (`std_group/spread`, `anomaly/truncated`),
reported as a share of all trajectories.

Findings:
- signal.filter_drops (warning): at least DROP_WARN of trajectories are dropped,
  so the effective batch is small; names the dominant reason.
"""

import re

from evo.harness import kit

LAYER = "signal"
DROP_WARN = 0.5


def reason_key(reason):
    head, _, detail = reason.partition(":")
    word = detail.strip().split(" ", 1)[0] if detail.strip() else ""
    key = head.strip() + (f"/{word}" if re.fullmatch(r"[A-Za-z_]+", word or "") else "")
    return re.sub(r"[^A-Za-z0-9_/]+", "_", key) or "unknown"


def analyze(ctx):
    table = ctx.rollouts
    if not kit.has(table, "filter_reason") or table.num_rows == 0:
        return kit.empty()
    import pyarrow.compute as pc

    n = table.num_rows
    counts = pc.value_counts(pc.fill_null(table.column("filter_reason"), ""))
    by_key = {}
    for value, count in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()):  # one entry per distinct reason
        if value:
            by_key[reason_key(value)] = by_key.get(reason_key(value), 0) + count
    dropped = sum(by_key.values())
    metrics = {"signal/filter_dropped_frac": dropped / n}
    for key, count in by_key.items():
        metrics[f"signal/filter_dropped/{key}"] = count / n
    findings = []
    if metrics["signal/filter_dropped_frac"] >= DROP_WARN:
        top = max(by_key, key=by_key.get)
        findings.append(kit.finding(
            "signal.filter_drops", "warning",
            f"filters dropped {metrics['signal/filter_dropped_frac']:.0%} of trajectories (mostly {top}: {by_key[top] / n:.0%})",
            rows=kit.rows_where(table.column("traj_id"), kit.nonempty(table, "filter_reason")), values={"by_reason": {k: v / n for k, v in by_key.items()}}))
    return {"metrics": metrics, "findings": findings}
