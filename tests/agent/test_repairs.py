"""Repairs: skills that undo a recipe setting the diagnosis shows harming the policy, ranked before the rest.

`drop-efficiency-factor` is checked on the diagnoses that fire it (episodes shortened while the score fell; the
one-turn collapse), the ones that must not, and the recipe it needs (the factor, not an additive efficiency term).
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
    assert proposal.manifest["skill"] == "drop-efficiency-factor"
    assert load_recipe(calc_factor / "recipe.yaml")["reward"]["terms"] == [
        {"name": "correctness", "weight": 1.0, "mode": "add"}]
    ranked = {n.split(":")[0].removeprefix("candidate "): float(n.rsplit(" ", 1)[1])
              for n in proposal.notes if n.startswith("candidate ")}
    assert list(ranked)[0] == "drop-efficiency-factor" and max(ranked.values()) > ranked["drop-efficiency-factor"]


@pytest.mark.parametrize("change", [
    {"version/ci_high_vs_parent": 0.05},  # fewer turns, but the score did not fall
    {"version/turns_ratio_vs_parent": 1.2},  # the score fell, but not by shortening episodes
])
def test_the_factor_stays_while_it_does_not_harm_the_policy(change, calc_factor, kit, make_ctx, settings):
    skill = [kit.skill_named("drop-efficiency-factor")]
    assert _propose(settings, make_ctx(kit.diagnosis({**SHORTENED, **change}), skills=skill, domain="calc")) is None


def test_only_a_multiplicative_efficiency_term_is_dropped(calc_factor, kit, make_ctx, settings):
    skill = [kit.skill_named("drop-efficiency-factor")]
    kit.set_recipe(calc_factor, **{"reward.terms": [{"name": "correctness"}, {"name": "efficiency", "weight": 0.1}]})
    assert _propose(settings, make_ctx(kit.diagnosis(COLLAPSED, [COLLAPSE]), skills=skill, domain="calc")) is None


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
