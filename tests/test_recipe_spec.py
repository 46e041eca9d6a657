"""The typed recipe: every section names exactly the schema's fields, and reads what the YAML says."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from evo.recipe import load_recipe, normalize_recipe
from evo.recipe_spec import SECTIONS, RecipeSpec
from evo.schemas import load_schema

RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@pytest.mark.parametrize("key", sorted(SECTIONS))
def test_each_section_has_exactly_the_schemas_fields(key):
    schema = load_schema("recipe")["properties"][key]["properties"]
    assert {f.name for f in fields(SECTIONS[key])} == set(schema), key


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_recipe_types(path):
    recipe = load_recipe(path)
    spec = RecipeSpec.of(recipe)
    assert spec.rollout.max_new_tokens == recipe["rollout"]["max_new_tokens"]
    assert spec.grpo.steps == recipe["grpo"]["steps"] and spec.domain.options == recipe["domain"]["options"]
    assert isinstance(spec.rollout.stop, tuple)


def test_defaults_come_from_the_schema_and_the_spec_is_frozen():
    spec = RecipeSpec.of(normalize_recipe({"domain": {"name": "arithmetic"}, "model": {"name": "builtin:tiny-char"},
                                           "name": "x"}))
    grpo = load_schema("recipe")["properties"]["grpo"]["properties"]
    assert spec.grpo.lr_schedule == grpo["lr_schedule"]["default"] and spec.grpo.warmup_steps == grpo["warmup_steps"]["default"]
    assert spec.rollout.max_total_tokens is None and spec.eval.max_tasks is None
    with pytest.raises(AttributeError):
        spec.grpo.steps = 3  # type: ignore[misc]
