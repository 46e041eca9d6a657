"""Signal layer: do longer or shorter responses get the larger advantages inside a group?

The loss aggregation decides how much each token of a response weighs. The
paper's mean over a trajectory's tokens (and any sequence mean) gives every
response the same total weight, so a token of a long response weighs less than
a token of a short one; when advantage goes with length, that dilutes the
long responses' signal (long chain-of-thought that wins, or long degenerate
text that loses and is barely penalised). Measured over the trajectories that
entered the loss (kept, not masked), within groups whose lengths and
advantages both vary (across groups, length tracks the task):

- `signal/length_advantage_corr`: the mean within-group Pearson r of
  `num_tokens` and `advantage`, and `_abs` its magnitude;
- `signal/length_cv_in_groups`: the mean within-group coefficient of variation
  of length (std / mean) over groups with signal — with equal lengths every
  aggregation is the same;
- `signal/length_advantage_groups`: how many groups were measured.

Findings:
- signal.length_biased_advantage (warning): |r| >= CORR_WARN and the length
  CV >= CV_MIN under a sequence-mean aggregation (`paper`, `seq-mean-token-mean`).
"""

import numpy as np

from evo.harness import kit

LAYER = "signal"
CORR_WARN = 0.3
CV_MIN = 0.2
SEQUENCE_MEANS = ("paper", "seq-mean-token-mean")


def analyze(ctx):
    table = ctx.rollouts
    needed = ("step", "group", "num_tokens", "advantage", "kept")
    if table is None or not table.num_rows or not all(kit.has(table, c) for c in needed):
        return kit.empty()
    live = kit.col(table, "kept", bool) & ~(kit.col(table, "masked", bool) if kit.has(table, "masked") else False)
    if not live.any():
        return kit.empty()
    sub = table.filter(live)
    g = kit.group_index(kit.col(sub, "step"), kit.col(sub, "group"))
    length = kit.col(sub, "num_tokens", np.float64)  # (N,)
    adv = kit.col(sub, "advantage", np.float64)  # (N,)
    mean_len = g.mean(length)  # (G,)
    dx = length - g.broadcast(mean_len)  # (N,) centred within group
    dy = adv - g.broadcast(g.mean(adv))
    var = g.sum(dx * dx) * g.sum(dy * dy)  # (G,)
    usable = var > 1e-12
    if not usable.any():
        return {"metrics": {"signal/length_advantage_corr": 0.0, "signal/length_advantage_corr_abs": 0.0,
                            "signal/length_advantage_groups": 0}, "findings": []}
    corr = g.sum(dx * dy)[usable] / np.sqrt(var[usable])  # (G_usable,)
    signal = g.std(adv) > 1e-12  # (G,) groups whose advantages vary
    cv = g.std(length)[signal] / np.maximum(mean_len[signal], 1.0)
    r = float(corr.mean())
    metrics = {"signal/length_advantage_corr": r, "signal/length_advantage_corr_abs": abs(r),
               "signal/length_cv_in_groups": float(cv.mean()) if len(cv) else 0.0,
               "signal/length_advantage_groups": int(usable.sum())}
    findings = []
    mode = ((ctx.recipe or {}).get("grpo") or {}).get("loss_aggregation", "paper")
    if abs(r) >= CORR_WARN and metrics["signal/length_cv_in_groups"] >= CV_MIN and mode in SEQUENCE_MEANS:
        side = "longer" if r > 0 else "shorter"
        findings.append(kit.finding(
            "signal.length_biased_advantage", "warning",
            f"{side} responses get the larger advantages within groups (mean r = {r:+.2f} over {int(usable.sum())} "
            f"groups, length CV {metrics['signal/length_cv_in_groups']:.2f}); the {mode} aggregation weighs a long "
            "response's tokens less than a short one's",
            rows=kit.rows_where(sub.column("traj_id"), g.broadcast(usable)) if kit.has(sub, "traj_id") else [],
            values={"length_advantage_corr": r, "loss_aggregation": mode}))
    return {"metrics": metrics, "findings": findings}
