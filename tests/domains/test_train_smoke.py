"""`evo train` runs one GRPO step of each domain's tiny recipe on CPU, end to end."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from evo.recipe import load_recipe, set_path
from evo.resources import resource_dir
from evo.yamlio import dump_yaml, load_yaml

SMALL = {"grpo.steps": 1, "rollout.prompts_per_step": 1, "rollout.num_generations": 2,
         "rollout.max_new_tokens": 6, "eval.k": 1, "eval.max_tasks": 1}


@pytest.mark.parametrize("domain", ["math", "code", "swe"])
def test_evo_train_one_step_of_the_tiny_recipe(domain, tmp_path):
    import pyarrow.parquet as pq

    from evo.cli import main

    recipe = load_yaml(resource_dir("recipes") / f"{domain}-tiny.yaml")
    for key, value in SMALL.items():
        recipe = set_path(recipe, key, value)
    if domain == "swe":
        recipe = set_path(recipe, "domain.options.max_turns", 2)
    path = tmp_path / "recipe.yaml"
    path.write_text(dump_yaml(recipe))
    recipe = load_recipe(path)
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["train", str(path), "--out", str(out), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["steps"] == 1 and summary["eval"]["n_tasks"] == 1
    rollouts = pq.read_table(out / "rollouts.parquet").to_pylist()
    assert len(rollouts) == 2
    from evo.domains import get_environment

    components = get_environment(domain, recipe["domain"]["options"]).reward_components
    assert all(f"reward/{c}" in rollouts[0] for c in components)
    if domain == "swe":
        assert all(1 <= r["turns"] <= 2 for r in rollouts)
    assert (out / "checkpoint" / "config.json").exists()
