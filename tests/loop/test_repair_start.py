"""Where a repair trains from: the last policy on its path trained without the setting it undoes.

The walk reads each ancestor's recipe.yaml through the lineage; a stand-in lineage holding real recipe texts
keeps the cases small (the end-to-end run is `tests/domains/test_embedded_loop.py`'s efficiency-factor test).
"""

from __future__ import annotations

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


def recipe(terms: list[dict]) -> dict:
    return normalize_recipe(set_path(load_yaml(resource_dir("recipes") / "calc-tiny.yaml"), "reward.terms", terms))


class Lineage:
    def __init__(self, versions: dict[str, tuple[list[str], list[dict]]]):
        base = load_yaml(resource_dir("recipes") / "calc-tiny.yaml")
        self.texts = {name: dump_yaml(set_path(base, "reward.terms", terms)) for name, (_, terms) in versions.items()}
        self.records = {name: SimpleNamespace(parents=parents) for name, (parents, _) in versions.items()}

    def read_all(self):
        return self.records

    def file_at(self, version, path):
        assert path == "recipe.yaml"
        return self.texts[version]


def ws(tmp_path: Path, versions) -> SimpleNamespace:
    return SimpleNamespace(root=tmp_path, lineage=Lineage(versions))


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
