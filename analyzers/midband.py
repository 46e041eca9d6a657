"""Signal layer: MidBand mass — share of groups whose pass rate lies in a middle band.

A group learns most when some samples pass and some fail. The pass rate of a
group is the mean of `reward/correctness` when stored, otherwise the share of
trajectories with reward > 0. MidBand mass is the share of groups with pass
rate in [MIDBAND_LOW, MIDBAND_HIGH]; on the validation set the same is reported
over tasks' Avg@k (`signal/eval_midband_mass`).

Findings:
- signal.low_midband (warning): MidBand mass below MIDBAND_WARN in recent steps —
  most groups are all-pass or all-fail, so data difficulty no longer matches the policy.
"""

import numpy as np

from evo.harness import kit, stats

LAYER = "signal"
MIDBAND_LOW = 0.2
MIDBAND_HIGH = 0.8
MIDBAND_WARN = 0.15


def _in_band(rate):
    return (rate >= MIDBAND_LOW) & (rate <= MIDBAND_HIGH)


def analyze(ctx):
    metrics, findings = {}, []
    if ctx.eval is not None and ctx.eval.num_rows:
        metrics["signal/eval_midband_mass"] = kit.frac(_in_band(stats.task_scores(ctx.eval).mean))
    g = kit.groups(ctx)
    table = ctx.rollouts
    if g is None:
        return {"metrics": metrics, "findings": findings}
    if kit.has(table, "reward/correctness"):
        passed = kit.col(table, "reward/correctness", np.float64)
    elif kit.has(table, "reward"):
        passed = (kit.col(table, "reward", np.float64) > 0).astype(np.float64)
    else:
        return {"metrics": metrics, "findings": findings}
    rate = g.mean(passed)  # (groups,)
    band = _in_band(rate)
    recent = g.recent()
    metrics.update({
        "signal/midband_mass": kit.frac(band),
        "signal/midband_mass_recent": kit.frac(band[recent]),
        "signal/group_pass_rate_mean": float(rate.mean()),
    })
    if metrics["signal/midband_mass_recent"] < MIDBAND_WARN:
        outside = g.broadcast(~band & recent)
        findings.append(kit.finding(
            "signal.low_midband", "warning",
            f"only {metrics['signal/midband_mass_recent']:.0%} of recent groups have a pass rate in "
            f"[{MIDBAND_LOW}, {MIDBAND_HIGH}] (mean pass rate {metrics['signal/group_pass_rate_mean']:.2f})",
            rows=kit.rows_where(table.column("traj_id"), outside),
            values={"midband_mass_recent": metrics["signal/midband_mass_recent"], "group_pass_rate_mean": metrics["signal/group_pass_rate_mean"]}))
    return {"metrics": metrics, "findings": findings}
