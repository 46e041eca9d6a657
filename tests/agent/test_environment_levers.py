"""Environment levers: the skills that change what the domain offers (turn limit, a tool), not the trainer.

Each is checked on the diagnosis that fires it, the one that must not, and the recipe it needs: the turn
limit is doubled only when episodes run out while acting, the calculator is offered only where it is off.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evo.agent import get_agent
from evo.recipe import load_recipe
from evo.yamlio import dump_yaml

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _propose(settings, ctx):
    return get_agent(settings, backend="heuristic").propose(ctx)


@pytest.fixture
def patch_short(worktree):
    shutil.copy(RECIPES / "patch-tiny-short.yaml", worktree / "recipe.yaml")
    return worktree


@pytest.fixture
def calc_notool(worktree):
    shutil.copy(RECIPES / "calc-tiny-notool.yaml", worktree / "recipe.yaml")
    return worktree


def test_turn_limit_doubles_when_episodes_run_out_while_acting(patch_short, kit, make_ctx, settings):
    diag = kit.diagnosis({"behavior/max_turns_frac": 0.39, "behavior/idle_failure_frac": 0.02})
    proposal = _propose(settings, make_ctx(diag, skills=[kit.skill_named("raise-turn-limit")], domain="patch"))
    assert proposal is not None and proposal.manifest["factor"] == "domain.options.max_turns"
    after = load_recipe(patch_short / "recipe.yaml")
    assert after["domain"]["options"] == {"max_turns": 8, "max_idle_turns": 3}


@pytest.mark.parametrize("metrics", [
    {"behavior/max_turns_frac": 0.07, "behavior/idle_failure_frac": 0.0},  # the limit rarely binds
    {"behavior/max_turns_frac": 0.6, "behavior/idle_failure_frac": 0.5},  # it binds, but the policy idles
])
def test_turn_limit_stays_when_it_is_not_the_bottleneck(metrics, patch_short, kit, make_ctx, settings):
    before = (patch_short / "recipe.yaml").read_text()
    ctx = make_ctx(kit.diagnosis(metrics), skills=[kit.skill_named("raise-turn-limit")], domain="patch")
    assert _propose(settings, ctx) is None
    assert (patch_short / "recipe.yaml").read_text() == before


def test_a_turn_limit_the_recipe_leaves_to_the_domain_is_raised_from_the_default(patch_short, kit, make_ctx, settings):
    """patch with `domain.options: {}` still runs eight turns (the domain's default), and they can bind."""
    from evo.recipe import set_path
    from evo.yamlio import load_yaml

    raw = load_yaml(patch_short / "recipe.yaml")
    (patch_short / "recipe.yaml").write_text(dump_yaml(set_path(raw, "domain.options", {})))
    diag = kit.diagnosis({"behavior/max_turns_frac": 0.39, "behavior/idle_failure_frac": 0.02})
    proposal = _propose(settings, make_ctx(diag, skills=[kit.skill_named("raise-turn-limit")], domain="patch"))
    assert proposal is not None and proposal.manifest["change_from"] == 8 and proposal.manifest["change_to"] == 16
    assert load_yaml(patch_short / "recipe.yaml")["domain"]["options"] == {"max_turns": 16}


def test_turn_limit_needs_a_domain_that_has_one(worktree, kit, make_ctx, settings):
    """The arithmetic domain is single-turn: it takes no `domain.options.max_turns` to raise."""
    diag = kit.diagnosis({"behavior/max_turns_frac": 0.9, "behavior/idle_failure_frac": 0.0})
    assert _propose(settings, make_ctx(diag, skills=[kit.skill_named("raise-turn-limit")])) is None


def test_calculator_is_offered_when_many_tasks_are_out_of_reach(calc_notool, kit, make_ctx, settings):
    diag = kit.diagnosis({"score/unsolved_task_frac": 0.64})
    proposal = _propose(settings, make_ctx(diag, skills=[kit.skill_named("offer-the-calculator")], domain="calc"))
    assert proposal is not None and proposal.manifest["factor"] == "domain.options.tool"
    assert load_recipe(calc_notool / "recipe.yaml")["domain"]["options"]["tool"] is True


def test_a_calculator_offered_under_one_turn_comes_with_the_turn_it_needs(calc_notool, kit, make_ctx, settings):
    """calc, `tool: false, max_turns: 1` (seed 1): offered alone, every call took the only turn and v1 scored 0.115
    against its control's 0.135. A call needs a turn before the answer: the limit goes to 2, and no further."""
    from evo.recipe import set_path
    from evo.yamlio import load_yaml

    raw = load_yaml(calc_notool / "recipe.yaml")
    (calc_notool / "recipe.yaml").write_text(dump_yaml(set_path(raw, "domain.options.max_turns", 1)))
    skill = [kit.skill_named("offer-the-calculator")]
    proposal = _propose(settings, make_ctx(kit.diagnosis({"score/unsolved_task_frac": 0.64}), skills=skill, domain="calc"))
    assert proposal is not None and proposal.manifest["factor"] == "domain.options"
    options = load_recipe(calc_notool / "recipe.yaml")["domain"]["options"]
    assert options["tool"] is True and options["max_turns"] == 2


def test_a_calculator_offered_where_the_recipe_leaves_the_turn_limit_to_the_domain(calc_notool, kit, make_ctx, settings):
    """`domain.options: {tool: false}`: the domain's default turn limit (3) stands; the skill still applies."""
    from evo.recipe import set_path
    from evo.yamlio import load_yaml

    raw = load_yaml(calc_notool / "recipe.yaml")
    (calc_notool / "recipe.yaml").write_text(dump_yaml(set_path(raw, "domain.options", {"tool": False})))
    skill = [kit.skill_named("offer-the-calculator")]
    proposal = _propose(settings, make_ctx(kit.diagnosis({"score/unsolved_task_frac": 0.64}), skills=skill, domain="calc"))
    assert proposal is not None and proposal.manifest["factor"] == "domain.options.tool"
    assert load_yaml(calc_notool / "recipe.yaml")["domain"]["options"] == {"tool": True}


def test_calculator_is_not_offered_twice_nor_without_the_evidence(calc_notool, kit, make_ctx, settings):
    skill = [kit.skill_named("offer-the-calculator")]
    assert _propose(settings, make_ctx(kit.diagnosis({"score/unsolved_task_frac": 0.1}), skills=skill,
                                       domain="calc")) is None
    shutil.copy(RECIPES / "calc-tiny.yaml", calc_notool / "recipe.yaml")  # the tool is already on
    assert _propose(settings, make_ctx(kit.diagnosis({"score/unsolved_task_frac": 0.64}), skills=skill,
                                       domain="calc")) is None
    assert _propose(settings, make_ctx(kit.diagnosis({"score/unsolved_task_frac": 0.64}), skills=skill,
                                       domain="arithmetic")) is None


def test_dead_groups_under_a_binding_turn_limit_raise_the_limit_not_a_filter(patch_short, kit, make_ctx, settings):
    """Dead groups are a symptom when episodes run out of turns: the filter's 'turns are ample' gate bars it
    (as its 'length is ample' gate does under truncation), and the turn limit is what the heuristic raises."""
    metrics = {"signal/dead_group_ratio": 0.8, "behavior/truncated_frac": 0.0,
               "behavior/max_turns_frac": 0.39, "behavior/idle_failure_frac": 0.02}
    skills = [kit.skill_named("std-group-filter"), kit.skill_named("raise-turn-limit")]
    proposal = _propose(settings, make_ctx(kit.diagnosis(metrics), skills=skills, domain="patch"))
    assert proposal.manifest["skill"] == "raise-turn-limit"
    shutil.copy(RECIPES / "patch-tiny.yaml", patch_short / "recipe.yaml")
    ample = {**metrics, "behavior/max_turns_frac": 0.07}
    proposal = _propose(settings, make_ctx(kit.diagnosis(ample), skills=skills, domain="patch"))
    assert proposal.manifest["skill"] == "std-group-filter"


def test_an_optional_gate_holds_only_where_its_metric_is_absent():
    from evo.agent.conditions import eval_triggers

    gate = {"metric": "behavior/max_turns_frac", "op": "<", "value": 0.25, "gate": True, "optional": True}
    dead = {"metric": "signal/dead_group_ratio", "op": ">", "value": 0.2}
    assert eval_triggers([dead, gate], {"signal/dead_group_ratio": 0.5})[0]  # single-turn: no turn counts
    assert not eval_triggers([dead, gate], {"signal/dead_group_ratio": 0.5, "behavior/max_turns_frac": 0.4})[0]
    assert not eval_triggers([dead, gate], {"signal/dead_group_ratio": 0.5, "behavior/max_turns_frac": None})[0]


def test_a_binding_budget_is_raised_before_a_stronger_optimizer_signal(patch_short, kit, make_ctx, settings):
    """Measured on patch-short's v0: 41% of episodes at the four-turn limit, KL 0.25 and 73x its first value. The KL figure
    is stronger evidence by margin, but it was measured on episodes the limit cut off: the limit goes first."""
    metrics = {"behavior/max_turns_frac": 0.41, "behavior/idle_failure_frac": 0.06, "signal/kl_last": 0.25,
               "signal/kl_change": 73.0, "signal/dead_group_ratio": 0.83, "behavior/truncated_frac": 0.01}
    skills = [kit.skill_named(n) for n in ("lower-learning-rate", "std-group-filter", "raise-turn-limit")]
    proposal = _propose(settings, make_ctx(kit.diagnosis(metrics), skills=skills, domain="patch"))
    assert proposal.manifest["skill"] == "raise-turn-limit"
    ranked = [n.split(":")[0].removeprefix("candidate ") for n in proposal.notes if n.startswith("candidate ")]
    assert ranked == ["raise-turn-limit", "lower-learning-rate"]  # std-group-filter: barred by its turns gate
    # with room to finish (the eight-turn v0), the same KL evidence leads
    shutil.copy(RECIPES / "patch-tiny.yaml", patch_short / "recipe.yaml")
    ample = {**metrics, "behavior/max_turns_frac": 0.06}
    assert _propose(settings, make_ctx(kit.diagnosis(ample), skills=skills, domain="patch")).manifest["skill"] == \
        "lower-learning-rate"


def test_a_turn_limit_that_cuts_off_the_tool_is_raised(worktree, kit, make_ctx, settings):
    """Measured on calc's v0 under `max_turns: 1` (seed 5): 5% of training episodes call the calculator, every one is
    cut off before its result can be answered, and the dead groups (57%) would otherwise bring StdGroupFilter."""
    raw = load_recipe(RECIPES / "calc-tiny.yaml")
    raw["domain"]["options"]["max_turns"] = 1
    (worktree / "recipe.yaml").write_text(dump_yaml(raw))
    metrics = {"behavior/max_turns_frac": 0.097, "behavior/tool_cut_off_frac": 1.0, "behavior/idle_failure_frac": 0.05,
               "signal/dead_group_ratio": 0.57, "behavior/truncated_frac": 0.003}
    skills = [kit.skill_named("std-group-filter"), kit.skill_named("raise-turn-limit")]
    proposal = _propose(settings, make_ctx(kit.diagnosis(metrics), skills=skills, domain="calc"))
    assert proposal.manifest["skill"] == "raise-turn-limit"
    assert load_recipe(worktree / "recipe.yaml")["domain"]["options"]["max_turns"] == 2
    (worktree / "recipe.yaml").write_text(dump_yaml(raw))
    answered = {**metrics, "behavior/tool_cut_off_frac": 0.02}  # calls that fit: the limit is not what binds
    assert _propose(settings, make_ctx(kit.diagnosis(answered), skills=skills, domain="calc")).manifest["skill"] == \
        "std-group-filter"
