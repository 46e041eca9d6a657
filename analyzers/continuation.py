"""Version layer: what training this version's own recipe further has been measured to give.

Every candidate is judged against a counterfactual control — its parent's
recipe continued from the parent's checkpoint — and the loop records each
control's own comparison with the parent (`evo.loop.versions.continuations`).
So after any trained child, a version knows whether *more of the same*
helps. A continue-training child measures it too.

Metrics (from the latest measurement, over `ctx.lineage`):
`version/continuation_measured` (1 when measured), `version/continuation_delta`,
`version/continuation_ci_low`, `version/continuation_ci_high`,
`version/continuation_noise_floor`, `version/continuation_z` (delta over its
95% half-width, times 1.96: above 1.96 the gain is significant),
`version/continue_streak` (consecutive continue-training versions ending here
that each improved on their parent; harness-only revisions between them train
nothing and neither count nor break it).

Findings:
- version.still_learning (info): the latest continuation beat this version (interval above 0).
- version.plateau (info): it did not: more of the same gained nothing the noise floor can tell apart.
"""

from evo.harness import kit

LAYER = "version"
Z95 = 1.959964


def analyze(ctx):
    lineage = {s["name"]: s for s in ctx.lineage or []}
    me = lineage.get(ctx.version)
    if me is None:
        return kit.empty()
    metrics = {"version/continuation_measured": 0, "version/continue_streak": _streak(lineage, ctx.version)}
    measured = [c for c in me.get("continuations") or [] if c.get("delta") is not None]
    if not measured:
        return {"metrics": metrics, "findings": []}
    last = measured[-1]
    delta, lo, hi = last["delta"], last.get("ci_low"), last.get("ci_high")
    half = (delta - lo) if lo is not None else None
    z = Z95 * delta / half if half and half > 0 else (0.0 if not delta else 1e6 * (1 if delta > 0 else -1))
    metrics.update({
        "version/continuation_measured": 1,
        "version/continuation_delta": delta,
        "version/continuation_ci_low": lo,
        "version/continuation_ci_high": hi,
        "version/continuation_noise_floor": last.get("noise_floor") or 0.0,
        "version/continuation_z": z,
    })
    metrics = {k: v for k, v in metrics.items() if v is not None}
    text = (f"continuing {ctx.version}'s recipe ({last['via']}) gave Δ {delta:+.4f} "
            f"[{lo:+.4f}, {hi:+.4f}] Avg@k" + (f", noise floor ±{last['noise_floor']:.4f}" if last.get("noise_floor") else ""))
    values = {k: last.get(k) for k in ("delta", "ci_low", "ci_high", "noise_floor", "via")}
    if lo is not None and lo > 0:
        finding = kit.finding("version.still_learning", "info", text + ": the policy is still learning", values=values)
    else:
        finding = kit.finding("version.plateau", "info", text + ": no gain the interval can tell from noise", values=values)
    return {"metrics": metrics, "findings": [finding]}


def _streak(lineage, name):
    count = 0
    while name in lineage:
        s = lineage[name]
        intervention = s.get("intervention")
        kind = intervention.get("kind") if isinstance(intervention, dict) else None  # a merge records a label
        if kind == "harness":  # a harness-only revision trains nothing: the streak runs through it
            name = (s.get("parents") or [None])[0]
            continue
        if kind != "continue" or s.get("outcome") != "improvement":
            break
        count += 1
        name = (s.get("parents") or [None])[0]
    return count
