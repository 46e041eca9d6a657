"""Where a repair trains from: the last policy on its path trained without the setting it undoes.

The walk reads each ancestor's recipe.yaml through the lineage; a stand-in lineage holding real recipe texts
keeps the cases small (the end-to-end run is `tests/domains/test_embedded_loop.py`'s efficiency-factor test).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from evo.loop.training import repair_start
from evo.recipe import set_path
from evo.resources import resource_dir
from evo.yamlio import dump_yaml, load_yaml

FACTOR = [{"name": "correctness", "weight": 1.0}, {"name": "efficiency", "mode": "factor"}]
PLAIN = [{"name": "correctness", "weight": 1.0}]
REPAIR = {"kind": "policy", "skill": "drop-efficiency-factor", "factor": "reward.terms"}


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
    assert repair_start(ws(tmp_path, versions), parent, REPAIR) == expected


def test_anything_but_a_repair_starts_from_its_parent(tmp_path):
    space = ws(tmp_path, {"v0": ([], FACTOR)})
    assert repair_start(space, "v0", {**REPAIR, "skill": "continuous-partial-credit"}) is None
    assert repair_start(space, "v0", {**REPAIR, "kind": "continue"}) is None
    assert repair_start(space, "v0", {"kind": "policy"}) is None  # an LLM agent's manifest without a skill
    # a repair whose setting the parent lacks (an agent naming the skill wrongly) has nothing to undo
    assert repair_start(ws(tmp_path, {"v0": ([], PLAIN)}), "v0", REPAIR) is None
