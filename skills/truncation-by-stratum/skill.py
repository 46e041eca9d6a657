"""Truncation rate per difficulty stratum (installed by the truncation-by-stratum skill).

An overall truncation rate averages easy and hard problems, so a generation
limit that only the hardest stratum hits stays hidden. This reports each
stratum's rate, the highest, and the spread, from the evaluation records when
the version has them (the frozen validation set) and from the rollouts otherwise.
"""

import numpy as np

LAYER = "behavior"
THRESHOLD = 0.15  # a stratum truncating above this share of responses is a finding


def _table(ctx):
    for name in ("eval", "rollouts"):
        table = getattr(ctx, name, None)
        if table is not None and table.num_rows and {"stratum", "truncated"} <= set(table.column_names):
            return name, table
    return None, None


def _row_ids(table, mask, limit=5):
    idx = np.flatnonzero(mask)[:limit]
    if "traj_id" in table.column_names:
        col = table.column("traj_id").to_pylist()
        return [col[i] for i in idx]
    tasks = table.column("task_id").to_pylist() if "task_id" in table.column_names else [str(i) for i in range(table.num_rows)]
    samples = table.column("sample").to_pylist() if "sample" in table.column_names else [0] * table.num_rows
    return [f"{tasks[i]}#{samples[i]}" for i in idx]


def analyze(ctx):
    source, table = _table(ctx)
    if table is None:
        return {"metrics": {}, "findings": []}
    strata = np.asarray(table.column("stratum").to_pylist(), dtype=object)
    truncated = np.asarray(table.column("truncated").to_pylist(), dtype=bool)
    names, inverse = np.unique(strata.astype(str), return_inverse=True)
    counts = np.bincount(inverse, minlength=len(names))  # (S,)
    rates = np.bincount(inverse, weights=truncated, minlength=len(names)) / counts  # (S,)
    worst = int(np.argmax(rates))
    # Per-stratum rates are the built-in truncation analyzer's; this adds what a trigger can compare.
    metrics = {
        "behavior/truncated_frac_max_stratum": float(rates[worst]),
        "behavior/truncated_frac_stratum_spread": float(rates.max() - rates.min()),
    }
    findings = []
    if rates[worst] > THRESHOLD:
        overall = float(truncated.mean())
        findings.append({
            "id": "behavior.truncation_by_stratum",
            "layer": LAYER,
            "severity": "critical" if rates[worst] > 0.5 else "warning",
            "message": (f"stratum {names[worst]!s} truncates {rates[worst]:.0%} of {source} responses "
                        f"(overall {overall:.0%}, {len(names)} strata)"),
            "evidence": {
                "rows": _row_ids(table, truncated & (inverse == worst)),
                "values": {"stratum": str(names[worst]), "truncated_frac": float(rates[worst]), "overall": overall,
                           "threshold": THRESHOLD},
            },
        })
    return {"metrics": metrics, "findings": findings}
