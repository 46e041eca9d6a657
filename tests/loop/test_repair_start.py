"""Where a repair trains from: the last policy on its path trained without the setting it undoes;
and any policy version of a collapsed parent: the last policy on its path that did not collapse.

The walk reads each ancestor's recipe.yaml through the lineage; a stand-in lineage holding real recipe texts
keeps the cases small (the end-to-end run is `tests/domains/test_embedded_loop.py`'s efficiency-factor test).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from evo.loop.training import repair_start
from evo.recipe import normalize_recipe, set_path
from evo.resources import resource_dir
from evo.yamlio import dump_yaml, load_yaml

FACTOR = [{"name": "correctness", "weight": 1.0}, {"name": "efficiency", "mode": "factor"}]
PLAIN = [{"name": "correctness", "weight": 1.0}]
PARTIAL = [*PLAIN, {"name": "partial_credit", "weight": 0.5}]


def recipe(terms: list[dict], base: str = "calc-tiny") -> dict:
    return normalize_recipe(set_path(load_yaml(resource_dir("recipes") / f"{base}.yaml"), "reward.terms", terms))


def record(parents: list[str], vetoes: list[str] = (), outcome: str = "insufficient") -> SimpleNamespace:
    """A lineage record whose `judged` event names its outcome and the audits that vetoed it."""
    judged = {"event": "judged", "outcome": outcome, "vetoes": [{"audit": a, "message": f"{a}: ..."} for a in vetoes]}
    return SimpleNamespace(parents=parents, last=lambda event: judged if event == "judged" else None)


class Lineage:
    def __init__(self, versions: dict[str, tuple[list[str], list[dict]]], base: str = "calc-tiny",
                 vetoed: dict[str, list[str]] | None = None):
        base = load_yaml(resource_dir("recipes") / f"{base}.yaml")
        self.texts = {name: dump_yaml(set_path(base, "reward.terms", terms)) for name, (_, terms) in versions.items()}
        self.records = {name: record(parents, (vetoed or {}).get(name, ())) for name, (parents, _) in versions.items()}

    def read_all(self):
        return self.records

    def file_at(self, version, path):
        assert path == "recipe.yaml"
        return self.texts[version]


def ws(tmp_path: Path, versions, base: str = "calc-tiny", vetoed=None) -> SimpleNamespace:
    return SimpleNamespace(root=tmp_path, lineage=Lineage(versions, base, vetoed), settings={"artifacts": {"root": ".evo/artifacts"}})


@pytest.mark.parametrize("versions, parent, expected", [
    ({"v0": ([], FACTOR)}, "v0", "base"),  # v0 was trained under the factor: back to the base model
    ({"v0": ([], FACTOR), "v1": (["v0"], FACTOR)}, "v1", "base"),  # so was its child
    ({"v0": ([], PLAIN), "v1": (["v0"], FACTOR)}, "v1", "v0"),  # the factor came in v1: v0's policy is unharmed
], ids=["v0", "grandchild", "later"])
def test_a_repair_starts_from_the_last_policy_trained_without_the_setting(versions, parent, expected, tmp_path):
    assert repair_start(ws(tmp_path, versions), parent, recipe(PLAIN)) == expected


def test_what_the_recipe_undoes_decides_not_what_the_manifest_says(tmp_path):
    """A recipe that keeps the factor trains from its parent, whatever skill an agent names; one that drops it
    (with another change, or by a person's hand) is a repair."""
    space = ws(tmp_path, {"v0": ([], FACTOR)})
    assert repair_start(space, "v0", recipe([*FACTOR, {"name": "partial_credit", "weight": 0.5}])) is None
    assert repair_start(space, "v0", recipe(PARTIAL)) == "base"
    # a parent without the setting has nothing to undo
    assert repair_start(ws(tmp_path, {"v0": ([], PLAIN)}), "v0", recipe(PARTIAL)) is None


BONUS = [*PLAIN, {"name": "efficiency", "weight": 0.3}]


def test_partial_credit_and_an_additive_bonus_are_repairs_on_patch(tmp_path):
    assert repair_start(ws(tmp_path, {"v0": ([], PARTIAL)}, "patch-tiny"), "v0", recipe(PLAIN, "patch-tiny")) == "base"
    later = ws(tmp_path, {"v0": ([], PLAIN), "v1": (["v0"], PARTIAL)}, "patch-tiny")
    assert repair_start(later, "v1", recipe(PLAIN, "patch-tiny")) == "v0"
    assert repair_start(ws(tmp_path, {"v0": ([], BONUS)}, "patch-tiny"), "v0", recipe(PLAIN, "patch-tiny")) == "base"


def test_undoing_two_settings_starts_before_both(tmp_path):
    """v0 had partial credit, v1 added the factor: a v2 dropping both must not start from v0 (still partial credit)."""
    both = ws(tmp_path, {"v0": ([], PARTIAL), "v1": (["v0"], [*PARTIAL, {"name": "efficiency", "mode": "factor"}])},
              "patch-tiny")
    assert repair_start(both, "v1", recipe(PLAIN, "patch-tiny")) == "base"


def test_removing_partial_credit_is_no_repair_in_a_single_turn_domain(tmp_path):
    """On arithmetic partial credit is the continuous-partial-credit lever, not a shortcut: train from the parent."""
    space = ws(tmp_path, {"v0": ([], PLAIN), "v1": (["v0"], PARTIAL)}, "arithmetic-tiny")
    assert repair_start(space, "v1", recipe(PLAIN, "arithmetic-tiny")) is None


class LimitLineage(Lineage):
    """calc-tiny with a turn limit per version: name -> (parents, max_turns)."""

    def __init__(self, versions: dict[str, tuple[list[str], int]]):
        base = load_yaml(resource_dir("recipes") / "calc-tiny.yaml")
        self.texts = {n: dump_yaml(set_path(base, "domain.options.max_turns", t)) for n, (_, t) in versions.items()}
        self.records = {n: record(p) for n, (p, _) in versions.items()}


def limit_ws(tmp_path, versions, tool_use: dict[str, tuple[float, float]]):
    """A workspace stand-in whose versions' diagnoses report (first-third, last-third) tool-use shares."""
    space = SimpleNamespace(root=tmp_path, lineage=LimitLineage(versions), settings={"artifacts": {"root": ".evo/artifacts"}})
    for name, (first, recent) in tool_use.items():
        folder = tmp_path / ".evo" / "artifacts" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "diagnosis.json").write_text(json.dumps(
            {"metrics": {"behavior/tool_use_frac_first": first, "behavior/tool_use_frac_recent": recent}}))
    return space


def turns(limit: int) -> dict:
    return normalize_recipe(set_path(load_yaml(resource_dir("recipes") / "calc-tiny.yaml"), "domain.options.max_turns", limit))


def test_a_lifted_limit_the_parent_learned_to_avoid_starts_before_it(tmp_path):
    """Measured on calc under max_turns 1 (seed 5): v0's episodes calling the calculator fell from 13% to 0% over
    its training; max_turns 2 from v0's weights scored 0.118 against its control's 0.117, from the base model 0.425."""
    abandoned = limit_ws(tmp_path, {"v0": ([], 1)}, {"v0": (0.134, 0.0)})
    assert repair_start(abandoned, "v0", turns(2)) == "base"
    learned = limit_ws(tmp_path / "b", {"v0": ([], 1)}, {"v0": (0.48, 0.99)})  # tool use rose: a plain child
    assert repair_start(learned, "v0", turns(2)) is None
    same_limit = limit_ws(tmp_path / "c", {"v0": ([], 1)}, {"v0": (0.134, 0.0)})
    assert repair_start(same_limit, "v0", turns(1)) is None  # nothing lifted


def test_a_lifted_limit_the_parent_left_to_the_domain_is_read_from_the_default(tmp_path):
    """A parent recipe without `max_turns` ran calc's default three turns: six is a lift, three is not."""
    abandoned = limit_ws(tmp_path, {"v0": ([], 3)}, {"v0": (0.134, 0.0)})
    abandoned.lineage.texts["v0"] = dump_yaml(set_path(load_yaml(resource_dir("recipes") / "calc-tiny.yaml"),
                                                       "domain.options", {"tool": True}))
    assert repair_start(abandoned, "v0", turns(6)) == "base"
    assert repair_start(abandoned, "v0", turns(3)) is None


def test_the_walk_stops_at_the_last_policy_trained_under_a_higher_limit(tmp_path):
    space = limit_ws(tmp_path, {"v0": ([], 3), "v1": (["v0"], 1), "v2": (["v1"], 1)}, {"v2": (0.3, 0.02)})
    assert repair_start(space, "v2", turns(2)) == "v0"


def test_any_policy_version_of_a_collapsed_parent_starts_before_the_collapse(tmp_path):
    """Measured on calc at ten times the default learning rate (seed 8): v0 collapsed to 0.000 with every recent group
    dead, and its continuation from those weights stayed at 0.000, since a dead group carries no gradient. A change
    that undoes nothing (here a lower learning rate) still trains from before the collapse."""
    lower = set_path(recipe(PLAIN), "grpo.learning_rate", 2.5e-4)
    assert repair_start(ws(tmp_path, {"v0": ([], PLAIN)}, vetoed={"v0": ["collapse"]}), "v0", lower) == "base"
    later = ws(tmp_path, {"v0": ([], PLAIN), "v1": (["v0"], PLAIN), "v2": (["v1"], PLAIN)},
               vetoed={"v1": ["collapse"], "v2": ["collapse"]})
    assert repair_start(later, "v2", lower) == "v0"  # the last policy on the path that did not collapse
    # another audit's veto (leaked answers) says the evaluation is suspect, not that the policy collapsed
    assert repair_start(ws(tmp_path, {"v0": ([], PLAIN)}, vetoed={"v0": ["leakage"]}), "v0", lower) is None
    assert repair_start(ws(tmp_path, {"v0": ([], PLAIN)}), "v0", lower) is None


def test_a_v0_worse_than_the_base_model_is_no_start(tmp_path):
    """calc with two samples a group (seed 12): v0 0.113 against the base model's 0.432, a regression without a
    veto. Its weights are measurably worse than the untrained model's: a child starts from the base model."""
    space = ws(tmp_path, {"v0": ([], PLAIN)})
    space.lineage.records["v0"] = record([], outcome="regression")
    assert repair_start(space, "v0", set_path(recipe(PLAIN), "grpo.learning_rate", 2.5e-4)) == "base"
    space.lineage.records["v0"] = record([], outcome="improvement")
    assert repair_start(space, "v0", set_path(recipe(PLAIN), "grpo.learning_rate", 2.5e-4)) is None


def test_a_repair_of_a_collapsed_parent_walks_past_both(tmp_path):
    """v0 trained without the factor but collapsed, v1 added the factor: dropping it again starts from the base
    model, not from v0's collapsed weights."""
    space = ws(tmp_path, {"v0": ([], PLAIN), "v1": (["v0"], FACTOR)}, vetoed={"v0": ["collapse"]})
    assert repair_start(space, "v1", recipe(PLAIN)) == "base"


def test_the_walk_past_a_harmed_policy_does_not_land_on_the_setting_being_undone(tmp_path):
    """v0 trained with the factor, v1 without it but collapsed, v2 with it again: dropping the factor from v2 must
    not start from v0 (trained with the factor) once the walk has passed v1 (collapsed)."""
    space = ws(tmp_path, {"v0": ([], FACTOR), "v1": (["v0"], PLAIN), "v2": (["v1"], FACTOR)}, vetoed={"v1": ["collapse"]})
    assert repair_start(space, "v2", recipe(PLAIN)) == "base"
