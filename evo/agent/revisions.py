"""Harness revisions: what the heuristic does when the evidence cannot choose.

Three kinds, each a single factor:

- **install an analyzer** from a harness skill (`skills/<name>/skill.py` copied
  to `analyzers/<analyzer>.py`) when the diagnosis lacks a metric that the
  trigger of a policy skill needs, one whose recipe requirements hold (the
  analyzer unblocking the most skills wins), when the harness skill's own
  triggers hold, or when its `outcomes` name the last outcome;
- **adjust an analyzer threshold**: an installed harness-skill analyzer whose
  metric sits just under its `THRESHOLD` (at least half of it) gets the
  threshold halved, so the near miss becomes a finding the next diagnosis cites;
- **re-run with more samples**: double `eval.k` (at most 64) so the next paired
  comparison has a narrower interval; only when that could settle it: more
  samples shrink the task-sampling part of the interval (`boot_ci_*`), never the
  seed noise floor, so where even the sampling part at 1/sqrt(2) leaves the
  same Δ inside the interval, the revision would spend a version measuring
  nothing (seen on calc: ±0.20 of which ±0.05 sampling, twice in one run).

Order by the last outcome: `insufficient` → more samples, install, threshold;
`mixed` → install, threshold, more samples; otherwise (no trigger fired) →
install, threshold. Refuted and already-tried revisions are skipped like policy ones.
"""

from __future__ import annotations

import re
from pathlib import Path

from evo.agent.candidate import Blocklist, Candidate, expected_cost, recipe_text
from evo.agent.conditions import eval_triggers, patched
from evo.agent.recipe_diff import format_change
from evo.recipe import get_path

MAX_EVAL_K = 64
_THRESHOLD = re.compile(r"^THRESHOLD\s*=\s*([0-9.eE+-]+)", re.M)


def _outcome_evidence(ctx) -> dict:
    h = (ctx.last_outcome or {}).get("headline") or {}
    metric = h.get("metric", "score/avg_at_k")
    return {f"{metric}:{k}": h[k] for k in ("delta", "ci_low", "ci_high", "p_value") if isinstance(h.get(k), (int, float))}


def _narrowed(headline: dict) -> tuple[float, float] | None:
    """The last interval's (low, high) once the task-sampling part of each side is 1/sqrt(2) as wide (eval.k doubled,
    the best case: which tasks were drawn does not change with k) and the seed part stays; None without the parts.

    This re-derives the judge's quadrature sum rather than calling `evo.harness.stats.widen`: the agent layer reads
    only the outcome the harness wrote, never the harness's code (agent and harness are independent layers)."""
    keys = ("delta", "ci_low", "ci_high", "boot_ci_low", "boot_ci_high")
    if not all(isinstance(headline.get(key), (int, float)) for key in keys):
        return None
    d = float(headline["delta"])

    def side(total: float, boot: float) -> float:
        seed_sq = max(total * total - boot * boot, 0.0)  # the judge adds the seed term in quadrature (stats.widen)
        return (boot * boot / 2 + seed_sq) ** 0.5

    return (d - side(d - headline["ci_low"], d - headline["boot_ci_low"]),
            d + side(headline["ci_high"] - d, headline["boot_ci_high"] - d))


def _more_samples(ctx, raw, current, text, block, outcome, notes: list[str]) -> Candidate | None:
    k = get_path(current, "eval.k", 8)
    if k >= MAX_EVAL_K:
        return None
    h = (ctx.last_outcome or {}).get("headline") or {}
    narrowed = _narrowed(h)
    if narrowed is not None and narrowed[0] <= 0 <= narrowed[1]:
        notes.append(f"not doubling eval.k: Δ {h['delta']:+.3g} [{h['ci_low']:+.3g}, {h['ci_high']:+.3g}] would at best "
                     f"narrow to [{narrowed[0]:+.3g}, {narrowed[1]:+.3g}], still spanning 0: the seed noise, not the "
                     "task sampling, makes it inconclusive")
        return None
    new_raw, new, diff = patched(raw, current, [{"path": "eval.k", "op": "scale", "value": 2, "max": MAX_EVAL_K}],
                                 source="the eval.k revision")
    change = format_change(diff)
    if block.why_blocked("eval.k", change):
        return None
    interval = (f"its interval [{h['ci_low']:+.3g}, {h['ci_high']:+.3g}] " if h.get("ci_low") is not None and h.get("ci_high") is not None
                else "its interval ")
    manifest = {
        "kind": "harness", "factor": "eval.k", "change": change, "change_from": k, "change_to": new["eval"]["k"],
        "hypothesis": (f"The last outcome was {outcome}: {interval}does not separate the versions, and no diagnostic "
                       f"explains why. With k={k} samples per task the per-task Avg@k is noisy; doubling k halves its "
                       "sampling variance, so the next paired comparison can tell a real effect from noise."),
        "evidence": {"findings": [], "metrics": _outcome_evidence(ctx)},
        "predicted_effect": "the next bootstrap interval is about 1/sqrt(2) as wide for the sampling part of the noise"
                            + (f" (the last one at best [{narrowed[0]:+.3g}, {narrowed[1]:+.3g}])" if narrowed else "")
                            + "; the outcome becomes improvement or regression if the effect is real",
        "expected_cost": expected_cost(current, new),
    }
    return Candidate(manifest, {"recipe.yaml": recipe_text(new_raw, text)}, 0.0, f"re-run with more samples (eval.k {k} → {new['eval']['k']})")


def _installs(ctx, skills, missing, block, worktree: Path, outcome: str | None) -> list[Candidate]:
    metrics = ctx.diagnosis.get("metrics") or {}
    found = []
    for skill in skills:
        if skill.kind != "harness" or skill.analyzer_source is None or not skill.applies_to(ctx.domain):
            continue
        rel = f"analyzers/{skill.analyzer}.py"
        if (worktree / rel).exists():
            continue
        unblocks = sorted({s for key in skill.provides for s in missing.get(key, [])})
        fires = bool(skill.triggers) and eval_triggers(skill.triggers, metrics)[0]
        explains = outcome is not None and outcome in skill.outcomes
        if not unblocks and not fires and not explains:
            continue
        change = f"{rel}: install analyzer {skill.analyzer} (skill {skill.name})"
        if block.why_blocked(rel, change):
            continue
        lacking = sorted(k for k in skill.provides if k in missing)
        if unblocks:
            why = (f"The diagnosis lacks {', '.join(lacking)}, which the trigger of {', '.join(unblocks)} needs, so the "
                   "evidence cannot decide whether that intervention is warranted. ")
        elif explains:
            why = f"The last outcome was {outcome} and the current diagnostics do not say why. "
        else:
            why = ""
        manifest = {
            "kind": "harness", "factor": rel, "change": change,
            "hypothesis": (why + skill.hypothesis).strip(),
            "evidence": {"findings": [], "metrics": {}},
            "predicted_effect": skill.predicted_effect or f"the next diagnosis reports {', '.join(skill.provides)}",
            "expected_cost": "no training cost; one more analyzer over the stored artifacts",
            "skill": skill.name,
        }
        text = skill.analyzer_source.read_text(encoding="utf-8")
        because = (f"unblocks {', '.join(unblocks)}" if unblocks else f"may explain the {outcome} outcome" if explains
                   else "its own trigger holds")
        found.append(Candidate(manifest, {rel: text}, len(unblocks) + 0.5 * fires + 0.25 * explains,
                               f"install {skill.analyzer} ({because})"))
    return sorted(found, key=lambda c: (-c.strength, c.manifest["factor"]))


def _thresholds(ctx, skills, block, worktree: Path) -> list[Candidate]:
    metrics = ctx.diagnosis.get("metrics") or {}
    found = []
    for skill in skills:
        if skill.kind != "harness" or not skill.analyzer or not skill.threshold_metric:
            continue
        rel = f"analyzers/{skill.analyzer}.py"
        path = worktree / rel
        value = metrics.get(skill.threshold_metric)
        if not path.exists() or not isinstance(value, (int, float)):
            continue
        source = path.read_text(encoding="utf-8")
        match = _THRESHOLD.search(source)
        if not match:
            continue
        threshold = float(match.group(1))
        if not (threshold / 2 <= value < threshold):
            continue
        new_threshold = round(threshold / 2, 6)
        change = f"{rel}: THRESHOLD {threshold:g} → {new_threshold:g}"
        if block.why_blocked(rel, change):
            continue
        new_source = source[: match.start(1)] + repr(new_threshold) + source[match.end(1):]
        manifest = {
            "kind": "harness", "factor": rel, "change": change,
            "hypothesis": (f"{skill.threshold_metric} = {value:.4g} sits just under the analyzer's threshold "
                           f"{threshold:g}, so the diagnosis reports no finding while the evidence cannot explain the "
                           "last outcome; a lower threshold turns the near miss into a finding the next step can act on."),
            "evidence": {"findings": [], "metrics": {skill.threshold_metric: value}},
            "predicted_effect": f"the next diagnosis carries a finding from {skill.analyzer} citing {skill.threshold_metric}",
            "expected_cost": "no training cost",
            "skill": skill.name,
        }
        found.append(Candidate(manifest, {rel: new_source}, value / threshold, f"lower {skill.analyzer} threshold"))
    return sorted(found, key=lambda c: (-c.strength, c.manifest["factor"]))


def harness_revision(ctx, raw: dict, current: dict, text: str, skills, missing: dict[str, list[str]],
                     block: Blocklist, outcome: str | None, notes: list[str]) -> Candidate | None:
    """The first applicable harness revision in the order the last outcome calls for, or None."""
    worktree = Path(ctx.worktree)

    def more():
        return [c] if (c := _more_samples(ctx, raw, current, text, block, outcome, notes)) else []

    def installs():
        return _installs(ctx, skills, missing, block, worktree, outcome)

    def thresholds():
        return _thresholds(ctx, skills, block, worktree)

    if outcome == "insufficient":
        order = (more, installs, thresholds)
    elif outcome == "mixed":
        order = (installs, thresholds, more)
    else:
        order = (installs, thresholds)
    for step in order:
        found = step()
        if found:
            notes.append(f"harness revision: {found[0].reason}")
            return found[0]
    notes.append("no harness revision applies")
    return None
