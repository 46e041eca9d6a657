"""Exploration at a plateau: when no lever's trigger fires and continuing stopped paying, the heuristic tries the
untriggered lever its evidence came nearest to, marked as an exploration, never a budget or repair skill."""

from __future__ import annotations

import math

import pytest

from evo.agent import get_agent
from evo.agent.conditions import trigger_distance
from evo.agent.guard import check_candidate
from evo.agent.skills import load_skills

PLATEAU = "continuing v0's recipe for 20 steps (v3, 3 seeds) gave Δ +0.044 [-0.056, +0.145]: insufficient"


def _explore(kit, make_ctx, settings, metrics, **kw):
    ctx = make_ctx(kit.diagnosis(metrics), phase="explore", **kw)
    ctx.plateau = PLATEAU
    return get_agent(settings, backend="heuristic").propose(ctx), ctx


@pytest.mark.parametrize("triggers, metrics, expected", [
    ([{"metric": "a", "op": ">", "value": 0.2}], {"a": 0.3}, 0.0),
    ([{"metric": "a", "op": ">", "value": 0.2}], {"a": 0.1}, math.log(2)),
    ([{"metric": "a", "op": ">", "value": 0.2}], {"a": 0.0}, 2.0),  # nothing measured of it: no ratio, the full 2
    ([{"metric": "a", "op": ">", "value": 0.2}], {}, 2.0),
    ([{"metric": "a", "op": "<", "value": -0.5}], {"a": 0.1}, 0.6),  # a negative threshold: the plain difference
    ([{"any": [{"metric": "a", "op": ">", "value": 0.2}, {"metric": "b", "op": ">", "value": 1.0}]}],
     {"a": 0.1, "b": 0.9}, math.log(1 / 0.9)),
    ([{"metric": "a", "op": ">", "value": 0.2}, {"metric": "b", "op": ">", "value": 1.0}], {"a": 0.1, "b": 2.0},
     math.log(2) / 2),
    ([{"metric": "a", "op": ">", "value": 0.2}, {"metric": "g", "op": ">=", "value": 8, "gate": True}],
     {"a": 0.1, "g": 9}, math.log(2)),
    ([{"metric": "a", "op": ">", "value": 0.2}, {"metric": "g", "op": ">=", "value": 8, "gate": True}],
     {"a": 0.1, "g": 3}, None),  # a failed gate: the skill does not apply, however near
    ([{"metric": "a", "op": ">", "value": 0.2}, {"metric": "g", "op": ">=", "value": 8, "gate": True}],
     {"a": 0.1}, None),  # an unmeasured gate does not hold either
    # an any-block gating as a whole: one member holding lets the skill apply, and it adds no distance
    ([{"metric": "a", "op": ">", "value": 0.2},
      {"gate": True, "any": [{"metric": "g", "op": "<=", "value": 0.1}, {"metric": "h", "op": "<=", "value": 0.1}]}],
     {"a": 0.1, "g": 0.5, "h": 0.05}, math.log(2)),
    ([{"metric": "a", "op": ">", "value": 0.2},
      {"gate": True, "any": [{"metric": "g", "op": "<=", "value": 0.1}, {"metric": "h", "op": "<=", "value": 0.1}]}],
     {"a": 0.1, "g": 0.5, "h": 0.12}, None),  # neither holds: not applicable, not a distance of 0.18
    ([], {"a": 1.0}, None),
])
def test_trigger_distance(triggers, metrics, expected):
    got = trigger_distance(triggers, metrics)
    assert got == (None if expected is None else pytest.approx(expected))


def test_a_plateau_explores_the_lever_nearest_to_firing_and_marks_it(kit, make_ctx, worktree, settings):
    near_clip = {"signal/clip_frac_high_last": 0.15, "signal/length_advantage_corr_abs": 0.05,
                 "signal/length_cv_in_groups": 0.5}
    ctx = make_ctx(kit.diagnosis(near_clip), harness_revised=True)
    assert get_agent(settings, backend="heuristic").propose(ctx) is None, "no trigger fires: nothing to propose"
    proposal, ctx = _explore(kit, make_ctx, settings, near_clip)
    m = proposal.manifest
    assert m["skill"] == "lower-learning-rate" and m["factor"] == "grpo.learning_rate" and m["kind"] == "policy"
    assert m["exploration"].startswith("trigger did not fire (distance 0.29")
    assert m["hypothesis"].startswith("Exploration, not evidence: " + PLATEAU)
    check_candidate(["recipe.yaml"], m, ctx.recipe, (worktree / "recipe.yaml").read_text(), settings)


def test_other_evidence_sends_the_exploration_elsewhere(kit, make_ctx, settings):
    near_length = {"signal/clip_frac_high_last": 0.0, "signal/length_advantage_corr_abs": 0.25,
                   "signal/length_cv_in_groups": 0.5}
    proposal, _ = _explore(kit, make_ctx, settings, near_length)
    assert proposal.manifest["skill"] == "token-mean-aggregation" and proposal.manifest["exploration"]
    # the same nearness behind a failed gate (lengths within a group hardly vary): that lever does not apply
    gated = {**near_length, "signal/length_cv_in_groups": 0.1, "signal/clip_frac_high_last": 0.1}
    assert _explore(kit, make_ctx, settings, gated)[0].manifest["skill"] == "lower-learning-rate"


def test_a_limit_not_binding_is_never_explored(kit, make_ctx, settings):
    """raise-generation-length sits nearest (9% truncated against 10%), but a budget skill answers a binding limit."""
    metrics = {"behavior/truncated_frac": 0.09, "behavior/truncated_frac_max_stratum": 0.2,
               "signal/clip_frac_high_last": 0.05}
    proposal, _ = _explore(kit, make_ctx, settings, metrics)
    skill = next(s for s in load_skills() if s.name == proposal.manifest["skill"])
    assert not skill.budget and not skill.repair
    assert proposal.manifest["skill"] == "lower-learning-rate"


def test_the_next_exploration_takes_the_next_lever(kit, make_ctx, settings):
    near_clip = {"signal/clip_frac_high_last": 0.15, "signal/length_advantage_corr_abs": 0.25,
                 "signal/length_cv_in_groups": 0.5}
    first, _ = _explore(kit, make_ctx, settings, near_clip)
    assert first.manifest["skill"] == "token-mean-aggregation"  # 0.18 away, lower-learning-rate 0.29
    sibling = {"name": "v4", "parents": ["v0"], "state": "pruned", "outcome": "insufficient",
               "intervention": first.manifest}
    second, _ = _explore(kit, make_ctx, settings, near_clip, lineage=[sibling])
    assert second.manifest["skill"] == "lower-learning-rate"


def test_without_a_plateau_phase_untriggered_levers_are_never_proposed(kit, make_ctx, settings):
    ctx = make_ctx(kit.diagnosis({"signal/clip_frac_high_last": 0.19}), harness_revised=True)
    assert get_agent(settings, backend="heuristic").propose(ctx) is None
