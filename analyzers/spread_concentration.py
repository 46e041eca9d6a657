"""Signal layer: how many groups with reward spread carry only a sliver of it?

GRPO learns from within-group spread. A group whose spread is a small fraction
of what the strongest groups show (a near miss scored 0.51 next to 0.50 by a
continuous reward) still gets full-size advantages after normalisation by its
own std, so its update is mostly noise next to its signal: the low-SNR groups
that RAGEN's SNR-aware filter drops. Over the training rollouts, for groups
whose spread of the total reward is above DEAD_EPSILON:

- `signal/weak_spread_group_frac`: share of those groups whose spread is below
  WEAK x the 90th percentile of their spreads;
- `signal/spread_top_half_share`: share of the total spread the top half of
  them holds (0.5 when every group is alike);
- `signal/spread_live_groups`: how many groups were measured.

Findings:
- signal.weak_spread_groups (info): weak share >= WEAK_INFO over at least
  MIN_GROUPS groups; cites trajectories of the weak groups.
"""

import numpy as np

from evo.harness import kit

LAYER = "signal"
DEAD_EPSILON = 1e-6
WEAK = 0.25
WEAK_INFO = 0.3
MIN_GROUPS = 8


def analyze(ctx):
    g = kit.groups(ctx)
    if g is None or not kit.has(ctx.rollouts, "reward"):
        return kit.empty()
    spread = g.std(kit.col(ctx.rollouts, "reward", np.float64))  # (groups,)
    live = spread > DEAD_EPSILON
    n = int(live.sum())
    if n == 0:
        return {"metrics": {"signal/spread_live_groups": 0}, "findings": []}
    values = np.sort(spread[live])[::-1]  # (n,) largest first
    weak = live & (spread < WEAK * np.percentile(values, 90))
    metrics = {"signal/weak_spread_group_frac": float(weak.sum() / n),
               "signal/spread_top_half_share": float(values[: max(1, n // 2)].sum() / values.sum()),
               "signal/spread_live_groups": n}
    findings = []
    if metrics["signal/weak_spread_group_frac"] >= WEAK_INFO and n >= MIN_GROUPS:
        findings.append(kit.finding(
            "signal.weak_spread_groups", "info",
            f"{metrics['signal/weak_spread_group_frac']:.0%} of {n} groups with spread have less than "
            f"{WEAK:.0%} of the strong groups' spread (the top half holds {metrics['signal/spread_top_half_share']:.0%}); "
            "normalised advantages make their noise as large as the others' signal",
            rows=kit.rows_where(ctx.rollouts.column("traj_id"), g.broadcast(weak)), values=dict(metrics)))
    return {"metrics": metrics, "findings": findings}
