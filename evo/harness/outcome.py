"""The four outcome classes of a version transition, decided in one place.

A comparison is never a bare keep/reject. The rules, applied in order
(docs/harness.md repeats them; change both together):

1. **insufficient** — fewer than MIN_TASKS paired tasks, or fewer than
   MIN_SAMPLES paired task-samples (n_tasks x k).
2. The headline (Avg@k) is *up* when the 95% bootstrap interval lies strictly
   above 0 (ci_low > 0) and *down* when strictly below (ci_high < 0).
   A stratum counts only when it has at least MIN_STRATUM_TASKS tasks, and is
   significantly better / worse by the same rule on its own interval.
3. Headline up: **mixed** if any stratum is significantly worse, or the
   candidate has a critical signal/behavior finding the baseline did not have;
   otherwise **improvement**.
4. Headline down: **mixed** if any stratum is significantly better; otherwise
   **regression**.
5. Interval spans 0: **mixed** if one stratum is significantly better while
   another is significantly worse (strata disagree); otherwise **insufficient**.

Audits are separate: a veto blocks promotion whatever the outcome class.
"""

from __future__ import annotations

from evo.vocabulary import OUTCOMES  # noqa: E402,F401 - the class names, owned by evo.vocabulary

MIN_TASKS = 5
MIN_SAMPLES = 30
MIN_STRATUM_TASKS = 3
DISAGREEING_LAYERS = ("signal", "behavior")  # critical findings here can contradict a score gain


def new_critical_findings(child_diag: dict | None, parent_diag: dict | None) -> list[str]:
    """Ids of critical signal/behavior findings the candidate has and the baseline has not."""
    if not child_diag:
        return []
    before = {f["id"] for f in (parent_diag or {}).get("findings", []) if f.get("severity") == "critical"}
    return sorted({f["id"] for f in child_diag.get("findings", [])
                   if f.get("severity") == "critical" and f.get("layer") in DISAGREEING_LAYERS and f["id"] not in before})


def _fmt(x: float) -> str:
    return f"{x:+.4f}"


def classify(headline: dict, *, k: int, new_critical: list[str] = ()) -> tuple[str, list[str]]:
    """Outcome class and the reasons behind it.

    `headline` is a paired-bootstrap result: {"delta", "ci_low", "ci_high", "n_tasks", "per_stratum": {s: {...}}}.
    """
    n_tasks = int(headline.get("n_tasks", 0))
    if n_tasks < MIN_TASKS:
        return "insufficient", [f"only {n_tasks} paired tasks (< {MIN_TASKS})"]
    if n_tasks * k < MIN_SAMPLES:
        return "insufficient", [f"only {n_tasks} tasks x {k} samples = {n_tasks * k} paired samples (< {MIN_SAMPLES})"]

    interval = f"delta {_fmt(headline['delta'])}, 95% CI [{_fmt(headline['ci_low'])}, {_fmt(headline['ci_high'])}]"
    counted = {s: r for s, r in (headline.get("per_stratum") or {}).items() if r.get("n_tasks", 0) >= MIN_STRATUM_TASKS}
    better = sorted(s for s, r in counted.items() if r["ci_low"] > 0)
    worse = sorted(s for s, r in counted.items() if r["ci_high"] < 0)
    up, down = headline["ci_low"] > 0, headline["ci_high"] < 0

    if up:
        reasons = [f"headline up: {interval}"]
        if worse:
            reasons.append("stratum significantly worse: " + ", ".join(f"{s} ({_fmt(counted[s]['delta'])})" for s in worse))
        if new_critical:
            reasons.append("new critical findings: " + ", ".join(new_critical))
        return ("mixed" if worse or new_critical else "improvement"), reasons
    if down:
        reasons = [f"headline down: {interval}"]
        if better:
            reasons.append("stratum significantly better: " + ", ".join(f"{s} ({_fmt(counted[s]['delta'])})" for s in better))
            return "mixed", reasons
        return "regression", reasons
    reasons = [f"headline interval spans 0: {interval}"]
    if better and worse:
        reasons.append(f"strata disagree: better {', '.join(better)}; worse {', '.join(worse)}")
        return "mixed", reasons
    return "insufficient", reasons
