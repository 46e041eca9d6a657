"""The candidate guard: every rule rejects with one recorded line, and honest candidates pass."""

from __future__ import annotations

import pytest

from evo.agent.guard import check_candidate, glob_match
from evo.errors import AgentError
from evo.recipe import load_recipe, set_path
from evo.resources import resource_dir
from evo.yamlio import dump_yaml, load_yaml

BASE_TEXT = (resource_dir("recipes") / "arithmetic-tiny.yaml").read_text()


def manifest(**overrides):
    m = {"kind": "policy", "factor": "rollout.max_new_tokens", "change": "rollout.max_new_tokens: 4 → 8",
         "hypothesis": "truncation cuts answers", "evidence": ["behavior.truncation"],
         "predicted_effect": "truncation falls", "expected_cost": "x2"}
    m.update(overrides)
    return {k: v for k, v in m.items() if v is not None}


def recipe_text(**changes):
    raw = load_yaml(resource_dir("recipes") / "arithmetic-tiny.yaml")
    for dotted, value in changes.items():
        raw = set_path(raw, dotted, value)
    return dump_yaml(raw)


@pytest.fixture
def before():
    return load_recipe(resource_dir("recipes") / "arithmetic-tiny.yaml")


def rejected(settings, before, changed, m, text):
    with pytest.raises(AgentError) as info:
        check_candidate(changed, m, before, text, settings)
    message = str(info.value)
    assert message.startswith("candidate rejected: ") and "\n" not in message
    return message


def test_single_factor_policy_candidate_passes(settings, before):
    check_candidate(["recipe.yaml"], manifest(), before, recipe_text(**{"rollout.max_new_tokens": 8}), settings)
    # skills/ and memory/ are bookkeeping beside any factor; .evo/ is never part of the diff
    check_candidate(["recipe.yaml", "memory/search_notes.md", "skills/new-idea/SKILL.md", ".evo/manifest.json"],
                    manifest(), before, recipe_text(**{"rollout.max_new_tokens": 8}), settings)


def test_group_factor_covers_its_keys(settings, before):
    text = recipe_text(filters={"std_group": {"enabled": True}, "anomaly": {"enabled": True}})
    check_candidate(["recipe.yaml"], manifest(factor="filters", change="both filters on"), before, text, settings)


def test_harness_candidates_pass(settings, before):
    check_candidate(["analyzers/echo.py"], manifest(kind="harness", factor="analyzers/echo.py", change="add echo"),
                    before, BASE_TEXT, settings)
    check_candidate(["recipe.yaml"], manifest(kind="harness", factor="eval.k", change="eval.k: 8 → 16"),
                    before, recipe_text(**{"eval.k": 16}), settings)
    # a declared harness revision may change the protected audit file it names
    check_candidate(["analyzers/audit_leakage.py"],
                    manifest(kind="harness", factor="analyzers/audit_leakage.py", change="tighten"), before, BASE_TEXT, settings)


def test_rejects_a_manifest_that_fails_its_schema(settings, before):
    msg = rejected(settings, before, ["recipe.yaml"], manifest(hypothesis=None), recipe_text(**{"rollout.max_new_tokens": 8}))
    assert "hypothesis" in msg
    msg = rejected(settings, before, ["recipe.yaml"], manifest(kind="reward"), recipe_text(**{"rollout.max_new_tokens": 8}))
    assert "kind" in msg and "'policy'" in msg


def test_rejects_paths_outside_the_allowed_globs(settings, before):
    msg = rejected(settings, before, ["recipe.yaml", "evo/train/objective.py"], manifest(),
                   recipe_text(**{"rollout.max_new_tokens": 8}))
    assert "evo/train/objective.py is outside the paths" in msg
    msg = rejected(settings, before, ["evo.yaml"], manifest(kind="harness", factor="evo.yaml"), BASE_TEXT)
    assert "evo.yaml is outside" in msg


def test_rejects_protected_paths(settings, before):
    settings = dict(settings, paths={"allowed": ["recipe.yaml", "analyzers/**", "data/**"],
                                     "protected": ["data/validation/**", "analyzers/audit_*.py"]})
    msg = rejected(settings, before, ["recipe.yaml", "data/validation/tasks.jsonl"], manifest(),
                   recipe_text(**{"rollout.max_new_tokens": 8}))
    assert "data/validation/tasks.jsonl is protected" in msg
    # an audit analyzer changed by a policy intervention, or by a harness revision naming another file
    rejected(settings, before, ["analyzers/audit_leakage.py"], manifest(kind="policy"), BASE_TEXT)
    msg = rejected(settings, before, ["analyzers/echo.py", "analyzers/audit_leakage.py"],
                   manifest(kind="harness", factor="analyzers/echo.py"), BASE_TEXT)
    assert "analyzers/audit_leakage.py is protected" in msg


def test_rejects_an_invalid_recipe(settings, before):
    msg = rejected(settings, before, ["recipe.yaml"], manifest(factor="rollout.num_generations"),
                   recipe_text(**{"rollout.num_generations": 1}))
    assert "the new recipe is invalid" in msg and "rollout.num_generations" in msg
    rejected(settings, before, ["recipe.yaml"], manifest(), "rollout: [unclosed")
    # options the domain itself refuses: caught here, not at the first training step
    msg = rejected(settings, before, ["recipe.yaml"], manifest(factor="domain.options"),
                   recipe_text(**{"domain.options": {"n_train": 0}}))
    assert "the new recipe is invalid" in msg and "domain.options.n_train: 0 is not a positive integer" in msg


def test_rejects_a_recipe_diff_beyond_the_declared_factor(settings, before):
    text = recipe_text(**{"rollout.max_new_tokens": 8, "grpo.learning_rate": 0.001})
    msg = rejected(settings, before, ["recipe.yaml"], manifest(), text)
    assert "also changes grpo.learning_rate" in msg


def test_rejects_a_declared_factor_that_did_not_change(settings, before):
    msg = rejected(settings, before, ["recipe.yaml"], manifest(), recipe_text(**{"rollout.max_new_tokens": 4}))
    assert "the recipe does not change" in msg
    msg = rejected(settings, before, ["analyzers/other.py"], manifest(kind="harness", factor="analyzers/echo.py"), BASE_TEXT)
    assert "analyzers/echo.py" in msg and "did not change" in msg


def test_rejects_a_second_factor(settings, before):
    msg = rejected(settings, before, ["recipe.yaml", "analyzers/echo.py"], manifest(),
                   recipe_text(**{"rollout.max_new_tokens": 8}))
    assert "analyzers/echo.py also changed" in msg
    msg = rejected(settings, before, ["analyzers/echo.py", "recipe.yaml"],
                   manifest(kind="harness", factor="analyzers/echo.py"), recipe_text(**{"rollout.max_new_tokens": 8}))
    assert "also changes the recipe (rollout.max_new_tokens)" in msg
    msg = rejected(settings, before, ["analyzers/echo.py", "analyzers/other.py"],
                   manifest(kind="harness", factor="analyzers/echo.py"), BASE_TEXT)
    assert "analyzers/other.py also changed" in msg


def test_rejects_a_kind_that_does_not_match_the_factor(settings, before):
    msg = rejected(settings, before, ["recipe.yaml"], manifest(factor="eval.k"), recipe_text(**{"eval.k": 16}))
    assert "declare kind 'harness'" in msg
    msg = rejected(settings, before, ["recipe.yaml"], manifest(kind="harness"), recipe_text(**{"rollout.max_new_tokens": 8}))
    assert "declare kind 'policy'" in msg
    msg = rejected(settings, before, ["analyzers/echo.py"], manifest(factor="analyzers/echo.py"), BASE_TEXT)
    assert "must be a recipe key" in msg


def test_rejects_an_empty_candidate(settings, before):
    msg = rejected(settings, before, [".evo/manifest.json"], manifest(), BASE_TEXT)
    assert "changes nothing" in msg


@pytest.mark.parametrize("path, pattern, expected", [
    ("analyzers/x.py", "analyzers/**", True),
    ("analyzers/deep/x.py", "analyzers/**", True),
    ("analyzers/audit_leak.py", "analyzers/audit_*.py", True),
    ("analyzers/sub/audit_leak.py", "analyzers/audit_*.py", False),
    ("recipe.yaml", "recipe.yaml", True),
    ("recipes.yaml", "recipe.yaml", False),
    ("data/validation/a/b.jsonl", "data/validation/**", True),
    ("x/data/validation/a.jsonl", "**/validation/*.jsonl", True),
])
def test_glob_semantics(path, pattern, expected):
    assert glob_match(path, pattern) is expected


def test_recipe_change_counts_even_when_the_path_list_misses_it(settings, before):
    # e.g. the second candidate of a step: recipe.yaml was already listed for the harness revision
    check_candidate([], manifest(), before, recipe_text(**{"rollout.max_new_tokens": 8}), settings)
    msg = rejected(settings, before, ["analyzers/echo.py"], manifest(kind="harness", factor="analyzers/echo.py"),
                   recipe_text(**{"rollout.max_new_tokens": 8}))
    assert "also changes the recipe" in msg
    locked = dict(settings, paths={"allowed": ["analyzers/**"], "protected": []})
    assert "recipe.yaml is outside" in rejected(locked, before, [], manifest(), recipe_text(**{"rollout.max_new_tokens": 8}))
