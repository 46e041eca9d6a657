"""The built-in domain recipes validate against the schema and build their environments."""

from __future__ import annotations

import pytest

from evo.domains import get_environment
from evo.recipe import load_recipe
from evo.resources import resource_dir

NAMES = [f"{d}-{s}" for d in ("math", "code", "swe") for s in ("tiny", "qwen3-gpu")]


@pytest.mark.parametrize("name", NAMES)
def test_recipe_validates_and_its_domain_builds(name):
    recipe = load_recipe(resource_dir("recipes") / f"{name}.yaml")
    env = get_environment(recipe["domain"]["name"], recipe["domain"]["options"])
    emitted = set(env.reward_components)
    assert {t["name"] for t in recipe["reward"]["terms"]} <= emitted  # every term is a real component
    assert env.tasks("train") and env.tasks(recipe["eval"]["split"])
    if name.endswith("tiny"):
        assert recipe["model"]["name"] == "builtin:tiny-char" and recipe["rollout"]["backend"] == "hf"
    else:
        assert recipe["model"]["name"].startswith("Qwen/Qwen3-") and recipe["rollout"]["backend"] == "vllm"
        assert recipe["rollout"]["max_new_tokens"] >= 4096


def test_swe_gpu_recipe_keeps_history_hidden_and_efficiency_out():
    recipe = load_recipe(resource_dir("recipes") / "swe-qwen3-gpu.yaml")
    assert recipe["domain"]["options"]["expose_git_history"] is False
    assert "efficiency" not in {t["name"] for t in recipe["reward"]["terms"]}


@pytest.mark.parametrize("name", ["calc", "patch", "swe"])
def test_the_option_defaults_are_what_an_environment_without_options_runs_under(name):
    """What a recipe leaves out still binds its episodes: readers of a recipe see the domain's own defaults."""
    from evo.domains import option_defaults, with_option_defaults

    defaults = option_defaults(name)
    env = get_environment(name, {})
    assert defaults["max_turns"] == env.max_turns
    filled = with_option_defaults({"domain": {"name": name, "options": {"max_turns": 1}}})
    assert filled["domain"]["options"] == {**defaults, "max_turns": 1}  # what the recipe names wins


def test_a_single_turn_domain_has_no_turn_limit_to_default():
    from evo.domains import option_defaults

    assert "max_turns" not in option_defaults("arithmetic")


def test_a_default_the_domain_computes_from_other_options_is_filled_too():
    """math runs four turns with its interpreter unless the recipe says otherwise, one without it."""
    from evo.domains import with_option_defaults

    def filled(options):
        return with_option_defaults({"domain": {"name": "math", "options": options}})["domain"]["options"]

    assert filled({"code_interpreter": True})["max_turns"] == get_environment("math", {"code_interpreter": True}).max_turns == 4
    assert filled({"code_interpreter": True, "max_turns": 2})["max_turns"] == 2
    assert "max_turns" not in filled({})
