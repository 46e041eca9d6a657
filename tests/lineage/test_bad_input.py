"""Bad files a careless user writes: each is one line naming the file, the place and the fix.

The YAML cases run through the one loader every YAML file goes through
(`evo.yamlio`); the value cases through the schemas' validation, which every
recipe, evo.yaml, manifest and skill front matter goes through. The last tests
run the real `evo` command on broken workspace files and check that refs,
notes and the tree are unchanged.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evo.agent.manifest import normalize_manifest
from evo.agent.skills import parse_skill_text
from evo.errors import AgentError, ConfigError
from evo.recipe import parse_recipe
from evo.settings import normalize_settings
from evo.yamlio import dump_yaml, load_yaml, parse_yaml

EVO = str(Path(sys.executable).with_name("evo"))
HEAD = "domain: {name: arithmetic}\nmodel: {name: builtin:tiny-char}\n"


def yaml_error(text: str, **kw) -> str:
    with pytest.raises(ConfigError) as err:
        parse_yaml(text, source="r.yaml", **kw)
    message = str(err.value)
    assert "\n" not in message and message.startswith("r.yaml:")
    return message


def recipe_error(extra: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse_recipe(HEAD + extra, source="r.yaml")
    assert "\n" not in str(err.value)
    return str(err.value)


# ------------------------------------------------------------------ the YAML loader
def test_yaml_12_numbers_and_strings():
    data = parse_yaml("lr: 5e-4\neps: 1e-6\nhalf: .5\nold: 1.0e-6\nint: 017\noct: 0o17\nno: no\nkey: yes\n"
                      "date: 2024-01-01\nsexa: 1:30\n", source="r.yaml")
    assert data == {"lr": 0.0005, "eps": 1e-6, "half": 0.5, "old": 1e-6, "int": 17, "oct": 15, "no": "no",
                    "key": "yes", "date": "2024-01-01", "sexa": "1:30"}
    assert parse_recipe(HEAD + "grpo: {learning_rate: 5e-4}\n")["grpo"]["learning_rate"] == 0.0005
    for text in ("5e-4", "yes", "017", "1:30", "2024-01-01", "1_000", "0x1f"):  # what we write reads back the same
        assert parse_yaml(dump_yaml({"v": text}), source="d")["v"] == text


def test_duplicate_keys_are_refused_with_both_lines():
    assert yaml_error("a: 1\nb: 2\na: 3\n") == ("r.yaml: line 3, column 1: duplicate key 'a' (first at line 1); "
                                               "keep one of them; YAML keys must be unique")
    assert "duplicate key 'epsilon' (first at line 3)" in yaml_error(
        "filters:\n  std_group:\n    epsilon: 1.0\n    enabled: true\n    epsilon: 2.0\n")
    assert parse_yaml("base: &b {x: 1}\nd:\n  <<: *b\n  x: 2\n", source="r")["d"] == {"x": 2}  # merge overrides are fine


def test_binary_and_non_utf8_files(tmp_path):
    (tmp_path / "recipe.yaml").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    for name, expected in (("recipe.yaml", "binary file (a NUL byte at offset 7)"),
                           ("latin1.yaml", "line 1: byte 0xe9 is not UTF-8 text; save the file as UTF-8")):
        with pytest.raises(ConfigError) as err:
            load_yaml(tmp_path / name)
        assert str(err.value).startswith(str(tmp_path / name)) and expected in str(err.value)


def test_deep_nesting_recursive_and_exponential_aliases():
    assert "nesting is deeper than 64 levels" in yaml_error("a: " + "[" * 3000 + "]" * 3000)
    assert "a recursive alias" in yaml_error("a: &a [*a]\n")
    assert "a recursive alias" in yaml_error("a: &a {b: {c: *a}}\n")
    laughs = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        laughs.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    assert "aliases expand to more than 100,000 values" in yaml_error("\n".join(laughs) + "\n")
    assert parse_yaml("a: &a [1, 2]\nb: *a\nc: *a\n", source="r") == {"a": [1, 2], "b": [1, 2], "c": [1, 2]}


def test_other_malformed_yaml_is_one_line():
    for text, expected in (("a: [1, 2\n", "malformed YAML"), ("a: b: c\n", "mapping values are not allowed"),
                           ("a: !!binary aGk=\n", "could not determine a constructor"),
                           ("a: !!int abc\n", "'abc' is not a valid !!int; write an integer"),
                           ("? [a]\n: 1\n", "unhashable key"), ("a: \x07\n", "control character U+0007"),
                           ("--- 1\n--- 2\n", "expected a single document"), ("", "found an empty document"),
                           ("- 1\n", "found list")):
        assert expected in yaml_error(text), text


# ------------------------------------------------------------------ values the schemas refuse
def test_non_finite_numbers_are_refused_in_recipes_settings_manifests_and_skills():
    assert recipe_error("grpo: {learning_rate: .nan}\n") == (
        "r.yaml: grpo.learning_rate: nan is not a finite number; give a finite value")
    assert "reward.terms[0].weight: inf is not a finite number" in recipe_error(
        "reward: {terms: [{name: correctness, weight: .inf}]}\n")
    assert "rollout.temperature: -inf" in recipe_error("rollout: {temperature: -.inf}\n")
    for section, key in (("gate", "approval_above_gpu_hours"), ("budget", "max_gpu_hours"), ("budget", "max_agent_cost_usd")):
        with pytest.raises(ConfigError, match=rf"^evo.yaml: {section}.{key}: nan is not a finite number"):
            normalize_settings({"domain": "arithmetic", "model": "m", section: {key: float("nan")}})
    manifest = {"kind": "policy", "factor": "grpo.learning_rate", "change": "a -> b", "hypothesis": "h",
                "evidence": {"findings": [], "metrics": {"signal/dead_group_ratio": float("nan")}},
                "predicted_effect": "p", "expected_cost": "c"}
    with pytest.raises(AgentError, match=r"evidence.metrics.signal/dead_group_ratio: nan is not a finite number"):
        normalize_manifest(manifest, source="manifest.json")
    skill = "---\nname: s\ndescription: d\ntriggers: [{metric: signal/x, op: '>', value: .inf}]\n---\nbody\n"
    with pytest.raises(AgentError, match=r"SKILL.md: triggers\[0\].value: inf is not a finite number"):
        parse_skill_text(skill, Path("skills/s/SKILL.md"))


def test_maxima_integers_and_the_exact_clip_rule():
    assert "rollout.num_generations: 1000000000 is invalid" in recipe_error("rollout: {num_generations: 1000000000}\n")
    assert "set it to 1024 or less" in recipe_error("rollout: {num_generations: 1000000000}\n")
    assert "write it as an integer: 1000000000" in recipe_error("rollout: {num_generations: 1e9}\n")
    assert "65,536" in recipe_error("rollout: {prompts_per_step: 4096, num_generations: 1024}\n")
    assert "eval.k: 100000 is invalid" in recipe_error("eval: {k: 100000}\n")
    assert recipe_error("grpo: {eps_low: 0.2, eps_high: 0.19}\n") == (
        "r.yaml: grpo.eps_high: 0.19 is below grpo.eps_low 0.2; Clip-Higher needs eps_high >= eps_low, "
        "so raise eps_high to 0.2 or more (paper: 0.20 / 0.27)")
    assert parse_recipe(HEAD + "grpo: {eps_low: 0.2, eps_high: 0.2}\n")["grpo"]["eps_high"] == 0.2


# ------------------------------------------------------------------ the real command on broken workspace files
def run_evo(*args, cwd):
    return subprocess.run([EVO, *map(str, args)], cwd=cwd, capture_output=True, text=True, env=os.environ.copy())


def assert_one_line(proc, *needles):
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("name", ["recipe.yaml", "evo.yaml"])
def test_binary_workspace_file_leaves_the_workspace_as_it_was(ws, h, name):
    (ws / name).write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    before = h.snapshot(ws)
    assert_one_line(run_evo("validate", cwd=ws), f"{name}: binary file", "UTF-8")
    assert_one_line(run_evo("step", cwd=ws / "analyzers"))
    after = h.snapshot(ws)
    assert {k: v for k, v in after.items() if k != "files"} == {k: v for k, v in before.items() if k != "files"}


def test_bad_recipes_given_to_evo_train(tmp_path):
    cases = {"deep.yaml": ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nesting is deeper than 64 levels"),
             "alias.yaml": ("a: &a [*a]\n", "recursive alias"),
             "nan.yaml": (HEAD + "grpo: {learning_rate: .nan}\n", "grpo.learning_rate: nan is not a finite number")}
    for name, (text, needle) in cases.items():
        (tmp_path / name).write_text(text)
        assert_one_line(run_evo("train", name, "--out", tmp_path / "run", cwd=tmp_path), f"Error: {name}:", needle)
    assert not (tmp_path / "run").exists()


def test_a_broken_diagnosis_given_to_evo_agent_is_one_line(ws, tmp_path):
    from click.testing import CliRunner

    from evo.cli import main

    for name, data, needle in (("bad.json", b"{bad", "bad.json: not valid JSON"),
                               ("bin.json", b"\x00\x01", "bin.json: binary file"),
                               ("list.json", b"[1]", "list.json: not a diagnosis")):
        (tmp_path / name).write_bytes(data)
        result = CliRunner().invoke(main, ["agent", "propose", "--diagnosis", str(tmp_path / name), "-C", str(ws)])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
        assert needle in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_evo_init_with_a_binary_recipe_is_one_line_and_creates_nothing(tmp_path):
    from click.testing import CliRunner

    from evo.cli import main

    (tmp_path / "human.yaml").write_bytes(b"\x00\x01\x02")
    result = CliRunner().invoke(main, ["init", str(tmp_path / "ws"), "--recipe", str(tmp_path / "human.yaml")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert f"{tmp_path / 'human.yaml'}: binary file" in result.output and not (tmp_path / "ws").exists()


def test_a_binary_skill_file_is_one_line_in_evo_validate(ws):
    (ws / "skills" / "std-group-filter" / "SKILL.md").write_bytes(b"\xff\xfe\x00\x00")
    assert_one_line(run_evo("validate", cwd=ws), "skills/std-group-filter/SKILL.md: binary file")


@pytest.mark.parametrize("domain, changes, needle", [
    ("calc", {"domain.options.max_turns": 0}, "domain.options.max_turns: 0 is not a positive integer; set it to"),
    # YAML's true is a Python bool, an int: refused as the recipe spells it, on every domain (math read it as 1)
    ("calc", {"domain.options.max_turns": True}, "domain.options.max_turns: true is not a positive integer"),
    ("math", {"domain.options.max_turns": True}, "domain.options.max_turns: true is not a positive integer"),
    ("arithmetic", {"domain.options.n_train": True}, "domain.options.n_train: true is not a positive integer"),
    ("calc", {"domain.options.tool": "yes"}, "domain.options.tool: 'yes' must be true or false"),
    ("patch", {"domain.options.max_idle_turns": -1}, "domain.options.max_idle_turns: -1 is not a positive integer"),
    ("patch", {"domain.options.typo_turns": 3}, "domain.options.typo_turns: not an option of the patch domain; "
                                                "use one of train_file, validation_file, files, max_turns, max_idle_turns"),
    # what else the trainer checked only when it started: components, filters, the evaluation split
    ("patch", {"reward.terms": [{"name": "correctness"}, {"name": "tool_success"}]},
     "reward.terms[1].name: 'tool_success' is not a component this domain emits"),
    ("calc", {"filters.std_group": {"enabled": True, "component": "edit_verify"}},
     "filters.std_group.component: 'edit_verify' is not a reward component of this domain"),
    ("calc", {"eval.split": "test"}, "eval.split: 'test' is not a calc split"),
])
def test_evo_init_with_a_recipe_its_domain_refuses_is_one_line_and_creates_nothing(domain, changes, needle, tmp_path):
    """Before, `evo init` committed such a v0 and the first `evo step` failed at the base model's evaluation."""
    from click.testing import CliRunner

    from evo.cli import main
    from evo.recipe import set_path
    from evo.resources import resource_dir

    recipe = load_yaml(resource_dir("recipes") / f"{domain}-tiny.yaml")
    for dotted, value in changes.items():
        recipe = set_path(recipe, dotted, value)
    (tmp_path / "mine.yaml").write_text(dump_yaml(recipe))
    result = CliRunner().invoke(main, ["init", str(tmp_path / "ws"), "--recipe", str(tmp_path / "mine.yaml")])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"{tmp_path / 'mine.yaml'}: {needle}" in lines[0], result.output
    assert not (tmp_path / "ws").exists()


def test_options_the_domain_refuses_are_one_line_in_evo_validate(ws, h):
    recipe = load_yaml(ws / "recipe.yaml")
    recipe["domain"]["options"] = {"n_train": 0}
    (ws / "recipe.yaml").write_text(dump_yaml(recipe))
    before = h.snapshot(ws)
    assert_one_line(run_evo("validate", cwd=ws), "recipe.yaml: domain.options.n_train: 0 is not a positive integer")
    assert h.snapshot(ws) == before
