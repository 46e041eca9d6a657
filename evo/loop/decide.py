"""Turn a judged version into a decision: promote, prune, or keep on the frontier.

A judged version carries two comparisons (`evo.loop.judge`): *attributed*
(against its counterfactual control: the intervention's own effect; its class
is the version's outcome) and *progress* (against the parent's checkpoint).
The rules, encoded once here and documented in the README, in order:

| evidence | decision |
|---|---|
| an audit vetoed the version | prune (the audit and its evidence are the reason; a collapse the parent already had is `inherited_vetoes`, not a veto: `evo.loop.judge.split_inherited`) |
| attributed `regression` | prune, kept as negative evidence |
| harness-only revision, not vetoed, not a regression | promote (the harness is adopted; the policy is the parent's) |
| attributed `improvement`, progress not `regression` | promote; frontier versions now below the new head are pruned as superseded |
| attributed `improvement`, progress `regression` | keep on the frontier: better than continuing, worse than the parent |
| attributed `mixed` | keep on the frontier; an ablation is scheduled (the next step reflects) |
| attributed `insufficient`, point estimate >= its baseline | keep on the frontier |
| attributed `insufficient`, point estimate < its baseline | prune: no evidence of benefit and worse on average |

Gains that continuing alone gives are not thrown away: the control's own
comparison with the parent is recorded on the parent, and the next step's
agent sees it as evidence for a continue-training version (which reuses the
control's run, trains nothing, and is judged against the parent).

After a keep, the frontier is capped at `search.frontier_size`: the lowest
headline versions beyond the cap are pruned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evo.vocabulary import Action, Headline, Outcome


@dataclass
class Decision:
    action: Action
    reason: str
    also_prune: list[tuple[str, str]] = field(default_factory=list)  # (version, reason)


def _headline_value(record) -> float | None:
    headline = getattr(record, "headline", None) or {}
    value = headline.get("value") if isinstance(headline, dict) else None
    return float(value) if value is not None else None


def decide(version: str, judged: dict, *, harness_only: bool, frontier: list, frontier_size: int) -> Decision:
    """Decide the fate of `version` from its `judged` event and the current frontier.

    `frontier` holds lineage records (with `.name` and `.headline`) of the other
    live, unpromoted versions. A collapse of a kind the parent already had does not
    decide, and the reason says it is there.
    """
    decision = _decide(version, judged, harness_only=harness_only, frontier=frontier, frontier_size=frontier_size)
    inherited = judged.get("inherited_vetoes") or []
    if inherited:
        decision.reason += f"; {inherited[0].get('message', 'a collapse')}, a kind the parent already had (recorded, not deciding)"
    return decision


def _decide(version: str, judged: dict, *, harness_only: bool, frontier: list, frontier_size: int) -> Decision:
    outcome = judged["outcome"]
    headline = judged.get("headline") or {}
    progress = (judged.get("progress") or {}).get("outcome")
    against = (judged.get("attributed") or {}).get("against")
    headline = {**headline, "against": against} if against else headline
    delta = headline.get("delta")
    vetoes = judged.get("vetoes") or []
    if vetoes:
        first = vetoes[0]
        return Decision(Action.PRUNE, f"vetoed by audit {first.get('audit', '?')}: {first.get('message', '')}".strip())
    if outcome == Outcome.REGRESSION:
        return Decision(Action.PRUNE, _evidence_phrase("regression", headline))
    if harness_only:
        return Decision(Action.PROMOTE, "harness revision adopted (policy unchanged, no audit veto)")
    if outcome == Outcome.IMPROVEMENT and progress == Outcome.REGRESSION:
        return Decision(Action.KEEP, _evidence_phrase("improvement over its control but a regression from its parent", headline))
    if outcome == Outcome.IMPROVEMENT:
        value = headline.get("value")
        superseded = [
            (rec.name, f"superseded by {version}")
            for rec in frontier
            if value is not None and _headline_value(rec) is not None and _headline_value(rec) < value
        ]
        return Decision(Action.PROMOTE, _evidence_phrase("improvement", headline), superseded)
    if outcome == Outcome.INSUFFICIENT and delta is not None and delta < 0:
        return Decision(Action.PRUNE, _evidence_phrase("insufficient evidence of benefit, point estimate below parent", headline))
    reason = _evidence_phrase(outcome, headline)
    if outcome == Outcome.MIXED:
        reason += "; ablation scheduled"
    cap = int(frontier_size)
    ranked = sorted(
        [(rec.name, _headline_value(rec)) for rec in frontier] + [(version, headline.get("value"))],
        key=lambda item: (item[1] is not None, item[1] or 0.0),
        reverse=True,
    )
    overflow = ranked[cap:]
    if any(name == version for name, _ in overflow):
        return Decision(Action.PRUNE, reason + f"; frontier is full ({cap}) and this is its weakest version")
    return Decision(Action.KEEP, reason, [(name, f"frontier full ({cap}); weakest after {version}") for name, _ in overflow])


def _evidence_phrase(label: str, headline: dict) -> str:
    return Headline.from_dict(headline).phrase(label, headline.get("against"))
