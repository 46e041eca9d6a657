"""Within-group correlation of response length and reward (installed by length-reward-coupling).

Across groups length tracks difficulty; inside a group the task is fixed, so a
consistent sign says what the reward pays for: positive = longer wins (length
hacking, or reasoning clipped by the limit), negative = shorter wins (a brevity
incentive, the precursor of one-turn collapse in multi-turn training).
"""

import numpy as np

from evo.harness import kit

LAYER = "behavior"
THRESHOLD = 0.3  # |mean within-group correlation| that makes a finding


def analyze(ctx):
    table = ctx.rollouts
    if not all(kit.has(table, name) for name in ("step", "group", "num_tokens", "reward")) or not table.num_rows:
        return kit.empty()
    g = kit.groups(ctx)
    length = kit.col(table, "num_tokens", np.float64)  # (N,)
    reward = kit.col(table, "reward", np.float64)  # (N,)
    dx = length - g.broadcast(g.mean(length))  # (N,) centred within group
    dy = reward - g.broadcast(g.mean(reward))
    cov = g.sum(dx * dy)  # (G,)
    var = g.sum(dx * dx) * g.sum(dy * dy)  # (G,)
    usable = var > 1e-12
    if not usable.any():
        return {"metrics": {"behavior/length_reward_corr": 0.0, "behavior/length_reward_corr_abs": 0.0}, "findings": []}
    corr = cov[usable] / np.sqrt(var[usable])  # (G_usable,)
    mean = float(corr.mean())
    metrics = {"behavior/length_reward_corr": mean, "behavior/length_reward_corr_abs": abs(mean),
               "behavior/length_reward_groups": int(usable.sum())}
    findings = []
    if abs(mean) >= THRESHOLD:
        direction = ("longer responses win within groups: the reward pays for length (or reasoning is clipped)"
                     if mean > 0 else "shorter responses win within groups: a brevity incentive that precedes one-turn collapse")
        extreme = np.argsort(-length if mean > 0 else length)[:5]
        rows = table.column("traj_id").take(extreme).to_pylist() if kit.has(table, "traj_id") else extreme.tolist()
        findings.append(kit.finding("behavior.length_reward_coupling", "warning",
                                    f"{direction} (mean r = {mean:+.2f} over {int(usable.sum())} groups)",
                                    rows=rows, values={"length_reward_corr": mean, "threshold": THRESHOLD}))
    return {"metrics": metrics, "findings": findings}
