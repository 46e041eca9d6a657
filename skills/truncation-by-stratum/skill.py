"""Truncation rate per difficulty stratum (installed by the truncation-by-stratum skill).

An overall truncation rate averages easy and hard problems, so a generation
limit that only the hardest stratum hits stays hidden. This reports each
stratum's rate, the highest, and the spread, from the evaluation records when
the version has them (the frozen validation set) and from the rollouts otherwise.
"""

import numpy as np

from evo.harness import kit

LAYER = "behavior"
THRESHOLD = 0.15  # a stratum truncating above this share of responses is a finding


def _table(ctx):
    for name in ("eval", "rollouts"):
        table = getattr(ctx, name)
        if kit.has(table, "stratum") and kit.has(table, "truncated") and table.num_rows:
            return name, table
    return None, None


def _row_ids(table, mask, limit=5):
    """Trajectory ids, or `task#sample` for validation rows (a task repeats once per sample)."""
    idx = np.flatnonzero(mask)[:limit]
    if kit.has(table, "traj_id"):
        return table.column("traj_id").take(idx).to_pylist()
    tasks = table.column("task_id").take(idx).to_pylist() if kit.has(table, "task_id") else idx.tolist()
    samples = table.column("sample").take(idx).to_pylist() if kit.has(table, "sample") else [0] * len(idx)
    return [f"{task}#{sample}" for task, sample in zip(tasks, samples)]


def analyze(ctx):
    source, table = _table(ctx)
    if table is None:
        return kit.empty()
    truncated = kit.col(table, "truncated", bool)  # (N,)
    rates = kit.mean_by(table, "stratum", truncated)  # stratum -> share truncated, sorted by stratum
    worst = max(rates, key=rates.get)
    # Per-stratum rates are the built-in truncation analyzer's; this adds what a trigger can compare.
    metrics = {
        "behavior/truncated_frac_max_stratum": rates[worst],
        "behavior/truncated_frac_stratum_spread": rates[worst] - min(rates.values()),
    }
    findings = []
    if rates[worst] > THRESHOLD:
        overall = kit.frac(truncated)
        findings.append(kit.finding(
            "behavior.truncation_by_stratum", "critical" if rates[worst] > 0.5 else "warning",
            f"stratum {worst} truncates {rates[worst]:.0%} of {source} responses (overall {overall:.0%}, {len(rates)} strata)",
            rows=_row_ids(table, truncated & kit.text_eq(table, "stratum", worst)),
            values={"stratum": worst, "truncated_frac": rates[worst], "overall": overall, "threshold": THRESHOLD}))
    return {"metrics": metrics, "findings": findings}
