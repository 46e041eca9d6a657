"""Repairs: skills that undo a recipe setting the diagnosis shows harming the policy, ranked before the rest.

`drop-efficiency-term` and `drop-partial-credit` are checked on the diagnoses that fire them (episodes shortened
while the score fell; the one-turn collapse), the ones that must not, and the recipes they need.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evo.agent import get_agent
from evo.recipe import load_recipe

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _propose(settings, ctx):
    return get_agent(settings, backend="heuristic").propose(ctx)


EFFICIENCY_FACTOR = [{"name": "correctness", "weight": 1.0}, {"name": "efficiency", "mode": "factor"}]
# Measured on the shipped calc v0 trained with the factor (seed 0, 20 steps): 22% fewer turns than the base model,
# Avg@k -0.206 [-0.274, -0.139] against it, 89% of validation episodes one turn; dead groups whose partial-credit
# and StdGroupFilter evidence is stronger by margin.
SHORTENED = {"version/turns_ratio_vs_parent": 0.786, "version/ci_high_vs_parent": -0.139,
             "behavior/eval_one_turn_frac": 0.89, "behavior/one_turn_frac_recent": 0.878,
             "signal/dead_group_ratio": 0.35, "signal/spread_in_dead_groups/partial_credit": 0.83,
             "behavior/truncated_frac": 0.04, "behavior/max_turns_frac": 0.0}
# Seed 11: the collapse itself (the audit vetoed v0).
COLLAPSED = {**SHORTENED, "behavior/eval_one_turn_frac": 0.92, "version/ci_high_vs_parent": -0.005}
COLLAPSE = {"id": "behavior.collapse_one_turn", "layer": "behavior", "severity": "critical",
            "message": "collapse (one_turn): 92% of validation episodes take a single turn", "evidence": {}}


@pytest.fixture
def calc_factor(worktree, kit):
    shutil.copy(RECIPES / "calc-tiny.yaml", worktree / "recipe.yaml")
    kit.set_recipe(worktree, **{"reward.terms": EFFICIENCY_FACTOR})
    return worktree


@pytest.mark.parametrize("metrics, findings", [(SHORTENED, []), (COLLAPSED, [COLLAPSE])], ids=["shortened", "collapsed"])
def test_a_policy_harmed_under_an_efficiency_factor_has_the_factor_dropped_first(metrics, findings, calc_factor, kit,
                                                                                 make_ctx, settings):
    """A repair: it ranks before the stronger dead-group evidence the factor produced."""
    proposal = _propose(settings, make_ctx(kit.diagnosis(metrics, findings), domain="calc"))
    assert proposal.manifest["skill"] == "drop-efficiency-term"
    assert load_recipe(calc_factor / "recipe.yaml")["reward"]["terms"] == [
        {"name": "correctness", "weight": 1.0, "mode": "add"}]
    ranked = _ranked(proposal)
    assert list(ranked)[0] == "drop-efficiency-term" and max(ranked.values()) > ranked["drop-efficiency-term"]


def _ranked(proposal):
    return {n.split(":")[0].removeprefix("candidate "): float(n.rsplit(" ", 1)[1])
            for n in proposal.notes if n.startswith("candidate ")}


@pytest.mark.parametrize("change", [
    {"version/ci_high_vs_parent": 0.05},  # fewer turns, but the score did not fall
    {"version/turns_ratio_vs_parent": 1.2},  # the score fell, but not by shortening episodes
])
def test_the_factor_stays_while_it_does_not_harm_the_policy(change, calc_factor, kit, make_ctx, settings):
    skill = [kit.skill_named("drop-efficiency-term")]
    assert _propose(settings, make_ctx(kit.diagnosis({**SHORTENED, **change}), skills=skill, domain="calc")) is None


def test_an_additive_efficiency_bonus_is_dropped_too(calc_factor, kit, make_ctx, settings):
    kit.set_recipe(calc_factor, **{"reward.terms": [{"name": "correctness"}, {"name": "efficiency", "weight": 0.3}]})
    proposal = _propose(settings, make_ctx(kit.diagnosis(COLLAPSED, [COLLAPSE]), domain="calc"))
    assert proposal.manifest["skill"] == "drop-efficiency-term"
    assert [t["name"] for t in load_recipe(calc_factor / "recipe.yaml")["reward"]["terms"]] == ["correctness"]


# Measured on patch's v0 with {name: partial_credit, weight: 0.5} beside correctness (seed 7, full settings): a third
# of the base model's turns, Avg@k 0.000 against its 0.078 (interval below 0), 77% of recent training and 82% of
# validation episodes one turn (a submit), 59% dead groups.
PREMATURE = {"version/turns_ratio_vs_parent": 0.342, "version/ci_high_vs_parent": -0.06,
             "behavior/eval_one_turn_frac": 0.819, "behavior/one_turn_frac_recent": 0.773,
             "signal/dead_group_ratio": 0.594, "signal/spread_in_dead_groups/partial_credit": 0.0,
             "behavior/truncated_frac": 0.0, "behavior/max_turns_frac": 0.005, "behavior/idle_failure_frac": 0.001}


@pytest.fixture
def patch_partial(worktree, kit):
    shutil.copy(RECIPES / "patch-tiny.yaml", worktree / "recipe.yaml")
    kit.set_recipe(worktree, **{"reward.terms": [{"name": "correctness"}, {"name": "partial_credit", "weight": 0.5}]})
    return worktree


def test_partial_credit_that_pays_an_early_submit_is_dropped_first(patch_partial, kit, make_ctx, settings):
    proposal = _propose(settings, make_ctx(kit.diagnosis(PREMATURE), domain="patch"))
    assert proposal.manifest["skill"] == "drop-partial-credit"
    assert [t["name"] for t in load_recipe(patch_partial / "recipe.yaml")["reward"]["terms"]] == ["correctness"]
    assert "std-group-filter" in _ranked(proposal)  # the dead groups had their candidate; the repair went first


def test_partial_credit_stays_where_episodes_did_not_shorten(patch_partial, kit, make_ctx, settings):
    skill = [kit.skill_named("drop-partial-credit")]
    longer = {**PREMATURE, "version/turns_ratio_vs_parent": 1.1, "behavior/eval_one_turn_frac": 0.2,
              "behavior/one_turn_frac_recent": 0.2}
    assert _propose(settings, make_ctx(kit.diagnosis(longer), skills=skill, domain="patch")) is None
    # single-turn (arithmetic): no turn counts at all, so a score drop alone is no shortcut
    shutil.copy(RECIPES / "arithmetic-tiny.yaml", patch_partial / "recipe.yaml")
    kit.set_recipe(patch_partial, **{"reward.terms": [{"name": "correctness"}, {"name": "partial_credit", "weight": 0.5}]})
    single = {"version/ci_high_vs_parent": -0.06, "signal/dead_group_ratio": 0.6}
    assert _propose(settings, make_ctx(kit.diagnosis(single), skills=skill)) is None


def test_drop_term_removes_only_the_terms_its_pattern_matches():
    from evo.agent.conditions import apply_patch

    terms = [{"name": "correctness", "weight": 1.0, "mode": "add"}, {"name": "efficiency", "weight": 0.1, "mode": "add"},
             {"name": "efficiency", "weight": 1.0, "mode": "factor"}]
    raw = {"reward": {"terms": terms}}
    factor_only = apply_patch(raw, raw, [{"path": "reward.terms", "op": "drop_term",
                                          "value": {"name": "efficiency", "mode": "factor"}}])
    assert factor_only["reward"]["terms"] == terms[:2] and raw["reward"]["terms"] == terms
    by_name = apply_patch(raw, raw, [{"path": "reward.terms", "op": "drop_term", "value": "efficiency"}])
    assert by_name["reward"]["terms"] == terms[:1]


def test_a_term_a_repair_removed_is_not_added_back_below_it(worktree, kit, make_ctx, settings):
    """After drop-partial-credit is kept in v1, v1's dead groups (the partial-credit evidence) must not bring the term
    back in v1's descendants; elsewhere in the tree the same evidence still does."""
    shutil.copy(RECIPES / "patch-tiny.yaml", worktree / "recipe.yaml")
    dead = {"signal/dead_group_ratio": 0.7, "signal/spread_in_dead_groups/partial_credit": 0.6,
            "behavior/truncated_frac": 0.0, "behavior/max_turns_frac": 0.05}
    repair = {"skill": "drop-partial-credit", "factor": "reward.terms", "change": "drop partial_credit"}
    lineage = [{"name": "v0", "parents": [], "state": "promoted", "intervention": None},
               {"name": "v1", "parents": ["v0"], "state": "promoted", "intervention": repair},
               {"name": "v2", "parents": ["v1"], "state": "promoted",
                "intervention": {"skill": "lower-learning-rate", "factor": "grpo.learning_rate", "change": "x"}}]
    skills = [kit.skill_named(n) for n in ("continuous-partial-credit", "drop-partial-credit")]
    agent = get_agent(settings, backend="heuristic")
    assert agent.propose(make_ctx(kit.diagnosis(dead), skills=skills, domain="patch", lineage=lineage, parent="v2")) is None
    assert any("the repair drop-partial-credit removed in v1" in n for n in agent.last_notes), agent.last_notes
    elsewhere = _propose(settings, make_ctx(kit.diagnosis(dead), skills=skills, domain="patch", lineage=lineage, parent="v0"))
    assert elsewhere.manifest["skill"] == "continuous-partial-credit"
