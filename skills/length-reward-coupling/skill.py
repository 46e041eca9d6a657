"""Within-group correlation of response length and reward (installed by length-reward-coupling).

Across groups length tracks difficulty; inside a group the task is fixed, so a
consistent sign says what the reward pays for: positive = longer wins (length
hacking, or reasoning clipped by the limit), negative = shorter wins (a brevity
incentive, the precursor of one-turn collapse in multi-turn training).
"""

import numpy as np

LAYER = "behavior"
THRESHOLD = 0.3  # |mean within-group correlation| that makes a finding


def analyze(ctx):
    table = getattr(ctx, "rollouts", None)
    if table is None or not table.num_rows or not {"step", "group", "num_tokens", "reward"} <= set(table.column_names):
        return {"metrics": {}, "findings": []}
    step = np.asarray(table.column("step").to_pylist(), dtype=np.int64)
    group = np.asarray(table.column("group").to_pylist(), dtype=np.int64)
    length = np.asarray(table.column("num_tokens").to_pylist(), dtype=float)  # (N,)
    reward = np.asarray(table.column("reward").to_pylist(), dtype=float)  # (N,)
    _, gid = np.unique(step * (group.max() + 1) + group, return_inverse=True)  # (N,) group number
    n = np.bincount(gid).astype(float)  # (G,)
    dx = length - (np.bincount(gid, weights=length) / n)[gid]  # (N,) centred within group
    dy = reward - (np.bincount(gid, weights=reward) / n)[gid]
    cov = np.bincount(gid, weights=dx * dy)  # (G,)
    var = np.bincount(gid, weights=dx * dx) * np.bincount(gid, weights=dy * dy)  # (G,)
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
        ids = table.column("traj_id").to_pylist() if "traj_id" in table.column_names else [str(i) for i in range(table.num_rows)]
        extreme = np.argsort(-length if mean > 0 else length)[:5]
        findings.append({
            "id": "behavior.length_reward_coupling",
            "layer": LAYER,
            "severity": "warning",
            "message": f"{direction} (mean r = {mean:+.2f} over {int(usable.sum())} groups)",
            "evidence": {"rows": [ids[i] for i in extreme], "values": {"length_reward_corr": mean, "threshold": THRESHOLD}},
        })
    return {"metrics": metrics, "findings": findings}
