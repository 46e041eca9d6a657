"""The heuristic trainer agent: offline, deterministic, evidence-driven.

How it chooses (one call, one single-factor intervention):

1. Policy candidates. Every policy skill that applies to the domain, whose
   triggers all hold on the parent's diagnostic metrics and whose requirements
   hold on the worktree's recipe, is applied to a copy of `recipe.yaml`. A
   candidate is dropped when the patch changes nothing, when the resulting
   recipe is invalid, when the same factor + change is refuted (memory's
   negative evidence, pruned / regression versions in the lineage, a
   negative-evidence skill), when it is already on the path from v0, or when
   a sibling (same parent) already tried it — unless the harness was revised
   in this step, which turns the repeat into a re-test (e.g. with more samples).
2. Budget first: a candidate from a `budget` skill (one that raises a limit
   of the episode, generation tokens, turns, the tools it may call or how cold
   it is sampled, which the diagnosis shows binding) comes before every other. Evidence measured on
   episodes cut off by a limit is confounded by the cut: dead groups, KL or clip figures describe
   clipped behaviour, and fixing the limit changes them all (the dead-group
   skills gate on "length and turns are ample" for the same reason).
   Then repairs: a candidate from a `repair` skill, which undoes a recipe
   setting the diagnosis shows harming the policy (a reward factor it
   collapsed under, a learning rate whose first updates overwrote it), comes before the rest: the rest of the evidence was
   measured on the harmed behaviour (the dead groups of a policy paid for
   answering at once are the factor's, not a missing reward signal's).
   Then ranking by evidence strength, highest first (ties by skill name):
       strength = mean over evidence triggers of clip(|ln(value / threshold)|, 0, 2)
                + 0.5 * severity weight of the strongest finding the skill answers
                  (info 0.25, warning 0.5, critical 1.0)
                + 0.5 * (wins - losses) / (uses + 1) from the skill's recorded evidence
   Gate triggers ("length is ample") only decide whether a skill applies.
3. When the evidence cannot choose — no policy candidate, or the last outcome
   was `mixed` / `insufficient` and the harness has not been revised yet this
   step — it revises the harness instead (see `evo.agent.revisions`). After a
   harness revision (`ctx.harness_revised`), it proposes a policy candidate or
   nothing; it never revises twice in one step, and reflects on an unsettled
   verdict once (`last_outcome["reflected"]`: a harness revision was judged since).
   A `continue` skill proposes training the parent's recipe further, unchanged
   (`_continue_candidate`), ranked with the policy candidates by the same rule.
4. On a healthy diagnosis (no trigger fires, no evidence missing) it returns
   None: no bottleneck shows, so no fix is proposed.
5. Exploration (phase "explore"): the loop asks again once it has measured that
   continuing the parent stopped paying (a plateau, or the measuring limit;
   `evo.loop.propose`). Then the untriggered policy levers are candidates:
   each that applies to the domain, whose requirements and gates hold, whose
   patch changes the recipe and which no block stops, ranked nearest to firing
   first (`conditions.trigger_distance`, less the same record and severity
   bonus). Budget and repair skills are left out: a limit the diagnosis does
   not show binding, or a setting it does not show harming, answers no
   observation. The manifest says so (`exploration`), and the verdict against
   the control decides as for any candidate; the lever blocked for this parent
   once tried, the next exploration takes the next.
"""

from __future__ import annotations

from pathlib import Path

from evo.agent.base import AgentContext, Proposal, zero_usage
from evo.agent.candidate import SEVERITY_WEIGHT, Blocklist, Candidate, evidence_text, expected_cost, recipe_text
from evo.agent.conditions import check_requirement, eval_triggers, patched, recipe_view, trigger_distance
from evo.agent.guard import CONTINUE
from evo.agent.manifest import clear_manifest, normalize_manifest, write_manifest
from evo.agent.recipe_diff import common_factor, covers, format_change
from evo.agent.revisions import harness_revision
from evo.agent.skills import Skill, load_skills
from evo.errors import AgentError, ConfigError
from evo.recipe import get_path, set_path
from evo.yamlio import parse_yaml

UNSETTLED = ("mixed", "insufficient")


def _cited(skill: Skill, ctx: AgentContext) -> tuple[list[dict], float]:
    """The diagnosis's findings the skill answers, and the strength they and the skill's record add."""
    findings = {f.get("id"): f for f in ctx.diagnosis.get("findings") or []}
    cited = [findings[i] for i in skill.findings if i in findings]
    severity = max((SEVERITY_WEIGHT.get(f.get("severity"), 0.0) for f in cited), default=0.0)
    record = skill.record()
    return cited, 0.5 * severity + 0.5 * (record["wins"] - record["losses"]) / (record["uses"] + 1)


def _policy_candidate(skill: Skill, ctx: AgentContext, raw: dict, current: dict, text: str, block: Blocklist,
                      notes: list[str], missing: dict[str, list[str]], *, explore: bool = False) -> Candidate | None:
    """The skill's patch as a candidate when its triggers hold; with `explore`, when they do not (module docstring, 5)."""
    metrics = ctx.diagnosis.get("metrics") or {}
    holds, strength, lacking, used = eval_triggers(skill.triggers, metrics)
    meets = all(check_requirement(r, current) for r in skill.requires)
    distance = None
    if explore:
        distance = trigger_distance(skill.triggers, metrics)
        # A firing lever was the propose phase's to weigh; behind a failed gate, or as a budget or repair skill
        # (a limit not binding, a harm not measured), an untriggered lever answers no observation.
        if holds or distance is None or not meets or skill.budget or skill.repair:
            return None
        strength = -distance
    elif not holds:
        if meets:  # a metric is worth measuring only for a skill the recipe would let act on it
            for key in lacking:
                missing.setdefault(key, []).append(skill.name)
        return None
    if not meets:
        notes.append(f"{skill.name}: triggers hold but the recipe does not meet its requirements")
        return None
    try:
        new_raw, new, diff = patched(raw, current, skill.patch, source=f"skill {skill.name}", metrics=metrics)
    except (AgentError, ConfigError) as exc:
        notes.append(f"{skill.name}: patch skipped ({exc})")
        return None
    if not diff:
        notes.append(f"{skill.name}: already applied (the patch changes nothing)")
        return None
    touched = [op["path"] for op in skill.patch if any(covers(op["path"], d) for d in diff)]
    factor = common_factor(touched) or common_factor(list(diff))
    change = format_change(diff)
    why = block.why_blocked(factor, change, current, new)
    if why:
        notes.append(f"{skill.name}: skipped `{change}` — {why}")
        return None

    cited, bonus = _cited(skill, ctx)
    strength += bonus
    hypothesis = f"{skill.hypothesis} Evidence: {evidence_text(used, skill.triggers, cited)}.".strip()
    if explore:
        hypothesis = (f"Exploration, not evidence: {ctx.plateau or 'no lever fires and continuing stopped paying'}. "
                      f"{skill.name}'s triggers do not fire (they miss by {distance:.2f} on the evidence scale; untried "
                      f"levers go nearest first), so this tests its premise: {skill.hypothesis}")

    before_value = get_path(current, factor)
    after_value = get_path(new, factor)
    manifest = {
        "kind": "policy",
        "factor": factor,
        "change": change,
        "change_from": before_value,
        "change_to": after_value,
        "hypothesis": hypothesis,
        "evidence": {"findings": [f["id"] for f in cited], "metrics": used},
        "predicted_effect": skill.predicted_effect or f"the metrics that triggered {skill.name} move back past their thresholds",
        "expected_cost": expected_cost(current, new),
        "skill": skill.name,
    }
    if explore:
        manifest["exploration"] = f"trigger did not fire (distance {distance:.2f})"
    if factor.startswith(("reward", "filters")) or skill.backtest:
        # Replayable from stored rollouts (reward, filters, or a skill that declares a backtest, e.g. a loss
        # aggregation): hand the loop the nested patch evo.harness.backtest takes.
        backtest: dict = {}
        for path in sorted(set(touched)):
            backtest = set_path(backtest, path, get_path(new, path))
        manifest["backtest"] = backtest
        question = (skill.backtest or {}).get("question")
        if question:
            manifest["predicted_effect"] += f" Backtest on the parent's rollouts first: {question}."
    return Candidate(manifest, {"recipe.yaml": recipe_text(new_raw, text)}, strength,
                     f"{skill.name}: " + (f"exploration, distance {distance:.3f}" if explore else f"strength {strength:.3f}"))


def _continue_candidate(skill: Skill, ctx: AgentContext, current: dict, block: Blocklist, notes: list[str],
                        missing: dict[str, list[str]]) -> Candidate | None:
    """Continue training the parent's recipe unchanged, when the evidence says the policy is still learning."""
    metrics = ctx.diagnosis.get("metrics") or {}
    holds, strength, lacking, used = eval_triggers(skill.triggers, metrics)
    if not holds:
        for key in lacking:
            missing.setdefault(key, []).append(skill.name)
        return None
    steps = int(get_path(current, "grpo.steps"))
    change = f"continue {ctx.parent}'s recipe for {steps} more steps"
    why = block.why_blocked(CONTINUE, change)
    if why:
        notes.append(f"{skill.name}: skipped `{change}` — {why}")
        return None
    cited, bonus = _cited(skill, ctx)
    strength += bonus
    manifest = {
        "kind": "continue", "factor": CONTINUE, "change": change,
        "hypothesis": f"{skill.hypothesis} Evidence: {evidence_text(used, skill.triggers, cited)}.".strip(),
        "evidence": {"findings": [f["id"] for f in cited], "metrics": used},
        "predicted_effect": skill.predicted_effect or "score/avg_at_k rises beyond the noise floor",
        "expected_cost": f"{steps} training steps of the parent's recipe (none when its control already ran them)",
        "skill": skill.name,
    }
    return Candidate(manifest, {}, strength, f"{skill.name}: strength {strength:.3f}")


class HeuristicAgent:
    """Matches skills' triggers against the diagnosis; see the module docstring for the rules."""

    name = "heuristic"

    def __init__(self, settings: dict):
        self.settings = settings
        self.last_usage = zero_usage()
        self.last_notes: list[str] = []

    def propose(self, ctx: AgentContext) -> Proposal | None:
        worktree = Path(ctx.worktree)
        clear_manifest(worktree)
        text = (worktree / "recipe.yaml").read_text(encoding="utf-8")
        raw = parse_yaml(text, source=str(worktree / "recipe.yaml"))
        current = recipe_view(raw)
        skills = ctx.skills or load_skills(ctx.root)
        block = Blocklist.from_context(ctx)
        notes: list[str] = []
        missing: dict[str, list[str]] = {}

        explore = ctx.phase == "explore"
        candidates = []
        for skill in skills:
            if not skill.applies_to(ctx.domain):
                continue
            cand = None
            if skill.kind == "policy" and skill.patch:
                cand = _policy_candidate(skill, ctx, raw, current, text, block, notes, missing, explore=explore)
            elif skill.kind == "continue" and not explore:
                cand = _continue_candidate(skill, ctx, current, block, notes, missing)
            if cand:
                candidates.append(cand)
        budget = {s.name for s in skills if s.budget}
        repair = {s.name for s in skills if s.repair}
        candidates.sort(key=lambda c: (c.manifest["skill"] not in budget, c.manifest["skill"] not in repair, -c.strength,
                                       c.manifest["skill"]))
        notes += [f"candidate {c.reason}" for c in candidates]

        # One reflection per unsettled verdict: a harness revision judged since then already answered it.
        outcome = None if (ctx.last_outcome or {}).get("reflected") else (ctx.last_outcome or {}).get("outcome")
        must_reflect = outcome in UNSETTLED and not ctx.harness_revised
        chosen = None
        if candidates and (explore or not must_reflect):
            chosen = candidates[0]
        elif not ctx.harness_revised and not explore:
            chosen = harness_revision(ctx, raw, current, text, skills, missing, block, outcome, notes)
            if chosen is None and candidates:
                notes.append("no harness revision applies; falling back to the strongest policy candidate")
                chosen = candidates[0]
        self.last_notes = notes
        if chosen is None:
            notes.append("nothing to propose: no applicable, unrefuted intervention and no gap in the evidence")
            return None
        for rel, new_text in chosen.writes.items():
            path = worktree / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(new_text, encoding="utf-8")
        manifest = normalize_manifest(chosen.manifest, source=f"heuristic manifest ({chosen.reason})")
        write_manifest(worktree, manifest)
        notes.append(f"chose {chosen.reason}")
        return Proposal(manifest=manifest, usage=zero_usage(), notes=notes)


BACKEND = HeuristicAgent  # evo.agent.base.get_agent looks it up by module name
