"""Signal layer: is the policy still learning at the end of its run?

The training reward per step (`reward/mean` in metrics.jsonl) is noisy: each
step scores a fresh batch of prompts. The question "would more steps help?"
is answered by the slope of a least-squares line through the *last half* of
the logged steps, with its standard error and t-statistic (slope / se, n - 2
degrees of freedom). A t above TREND_T says the reward was still rising when
the run stopped; |t| below FLAT_T says the curve was flat within its noise.

Metrics: `signal/reward_slope` (reward per step, last half),
`signal/reward_slope_se`, `signal/reward_slope_t`, `signal/reward_slope_steps`,
`signal/reward_gain_last_half` (slope x steps: the rise over the last half);
`signal/dead_group_ratio_first` / `_last` / `_change` (mean of the first and
last thirds of the logged steps, and last - first: are more groups going dead?).

Findings:
- signal.reward_rising (info): t >= TREND_T — the run ended while reward still rose.
- signal.reward_flat (info): |t| < FLAT_T over at least MIN_STEPS steps.
"""

import numpy as np

from evo.harness import kit

LAYER = "signal"
MIN_STEPS = 6  # fewer logged steps in the last half than this: no trend is claimed
TREND_T = 2.0
FLAT_T = 1.0
KEY = "reward/mean"


def slope_fit(y: np.ndarray) -> tuple[float, float]:
    """OLS slope of y over its index and the slope's standard error."""
    n = len(y)
    x = np.arange(n, dtype=np.float64)
    x -= x.mean()
    slope = float((x * (y - y.mean())).sum() / (x * x).sum())
    resid = y - y.mean() - slope * x
    dof = max(n - 2, 1)
    se = float(np.sqrt((resid * resid).sum() / dof / (x * x).sum()))
    return slope, se


def analyze(ctx):
    metrics = {}
    dead = kit.thirds(ctx.metrics, "signal/dead_group_ratio")
    if dead is not None:
        metrics.update({"signal/dead_group_ratio_first": dead[0], "signal/dead_group_ratio_last": dead[1],
                        "signal/dead_group_ratio_change": dead[1] - dead[0]})
    rows = [r for r in ctx.metrics if isinstance(r.get(KEY), (int, float))]
    half = rows[len(rows) // 2:]
    if len(half) < MIN_STEPS:
        return {"metrics": metrics, "findings": []}
    y = np.array([float(r[KEY]) for r in half])
    slope, se = slope_fit(y)
    t = slope / se if se > 0 else (0.0 if slope == 0 else float(np.sign(slope)) * 1e6)
    metrics.update({
        "signal/reward_slope": slope,
        "signal/reward_slope_se": se,
        "signal/reward_slope_t": float(t),
        "signal/reward_slope_steps": len(half),
        "signal/reward_gain_last_half": slope * len(half),
    })
    findings = []
    values = {"slope": slope, "se": se, "t": float(t), "steps": len(half)}
    if t >= TREND_T:
        findings.append(kit.finding(
            "signal.reward_rising", "info",
            f"training reward was still rising at the end of the run: {slope:+.4f}/step over the last {len(half)} steps "
            f"(t = {t:.1f}; +{slope * len(half):.3f} over that half)", values=values))
    elif abs(t) < FLAT_T:
        findings.append(kit.finding(
            "signal.reward_flat", "info",
            f"training reward was flat over the last {len(half)} steps: {slope:+.4f}/step (t = {t:.1f})", values=values))
    return {"metrics": metrics, "findings": findings}
