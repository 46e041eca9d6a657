"""Signal layer: dead-group ratio — groups whose trajectories all got the same reward.

GRPO's advantage is reward minus the group mean, so a group with no reward
spread contributes no gradient at all. Measured over every rollout group
(before filters), overall and over the last third of training steps, and split
into all-fail (every reward <= 0) and all-pass dead groups, since the two call
for different fixes (easier data or shaped reward vs. harder data).

Findings:
- signal.dead_groups (warning): dead-group ratio >= DEAD_WARN overall or in
  recent steps; cites trajectories of dead groups.
"""

import numpy as np

from evo.harness import kit

LAYER = "signal"
DEAD_EPSILON = 1e-6  # same default as StdGroupFilter's epsilon
DEAD_WARN = 0.3


def analyze(ctx):
    g = kit.groups(ctx)
    if g is None or not kit.has(ctx.rollouts, "reward"):
        return kit.empty()
    reward = kit.col(ctx.rollouts, "reward", np.float64)
    dead = g.std(reward) <= DEAD_EPSILON  # (groups,)
    all_fail = dead & (g.max(reward) <= 0)
    recent = g.recent()
    n_dead = int(dead.sum())
    metrics = {
        "signal/n_groups": g.n_groups,
        "signal/dead_group_ratio": kit.frac(dead),
        "signal/dead_group_ratio_recent": kit.frac(dead[recent]),
        "signal/dead_all_fail_frac": float(all_fail.sum() / n_dead) if n_dead else 0.0,
        "signal/dead_all_pass_frac": float((dead & ~all_fail).sum() / n_dead) if n_dead else 0.0,
    }
    findings = []
    worst = max(metrics["signal/dead_group_ratio"], metrics["signal/dead_group_ratio_recent"])
    if worst >= DEAD_WARN:
        ids = ctx.rollouts.column("traj_id")
        findings.append(kit.finding(
            "signal.dead_groups", "warning",
            f"{metrics['signal/dead_group_ratio']:.0%} of {g.n_groups} groups have no reward spread "
            f"(recent steps {metrics['signal/dead_group_ratio_recent']:.0%}; "
            f"{metrics['signal/dead_all_fail_frac']:.0%} of them all-fail)",
            rows=kit.rows_where(ids, g.broadcast(dead)), values={k.split("/", 1)[1]: v for k, v in metrics.items()}))
    return {"metrics": metrics, "findings": findings}
