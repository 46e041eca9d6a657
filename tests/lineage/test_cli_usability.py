"""What a new user trips on: running evo from a subfolder, a clone without an identity,
argument order, effective values in `evo diff`, error messages naming the file given."""

from __future__ import annotations

import json
import subprocess

import pytest
from click.testing import CliRunner

from evo.cli import main
from evo.lineage import Lineage, find_workspace_root


def evo(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def ok(*args):
    result = evo(*args)
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result


@pytest.mark.parametrize("where", ["analyzers", "memory", ".evo/worktrees/v1", ".evo/worktrees/v1/analyzers"])
def test_every_command_finds_the_workspace_from_a_subfolder(lin, ws, h, monkeypatch, where):
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    monkeypatch.chdir(ws / where)
    assert find_workspace_root(".") == ws
    assert json.loads(ok("status", "--json").output)["workspace"] == str(ws)
    for command in (("log",), ("show", "v1"), ("diff", "v0", "v1"), ("validate",), ("fsck",),
                    ("skills", "list"), ("memory", "show"), ("pr", "v1")):
        ok(*command)


def test_a_write_command_from_a_subfolder_writes_the_workspace(lin, ws, h, monkeypatch):
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    monkeypatch.chdir(ws / "analyzers")
    ok("promote", "v1", "--reason", "from a subfolder")
    assert lin.record("v1").state == "promoted" and "max_new_tokens: 8" in (ws / "recipe.yaml").read_text()


def test_outside_any_workspace_the_error_names_the_folder(tmp_path, monkeypatch):
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)
    for command in (("status",), ("log",), ("fsck",), ("validate",)):
        result = evo(*command)
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (command, result.exception)
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert "is not a git repository" in evo("status").output and str(plain) in evo("status").output
    assert "evo.yaml" in evo("validate").output  # the file it looked for


def test_a_clone_without_git_identity_gets_the_local_one_on_first_write(ws, tmp_path, h):
    clone = tmp_path / "clone"
    h.git(tmp_path, "clone", "-q", str(ws), str(clone))
    h.git(clone, "fetch", "-q", "origin", "refs/notes/evo/*:refs/notes/evo/*", "refs/heads/evo/*:refs/heads/evo/*",
          "refs/evo/*:refs/evo/*")
    assert h.git(clone, "config", "--local", "--get", "user.name", check=False) == ""  # the fixture's env has none
    result = evo("merge", "v0", "v0", "--reason", "x", "-C", clone)  # a refusal writes nothing
    assert result.exit_code == 1 and h.git(clone, "config", "--local", "--get", "user.name", check=False) == ""
    lin = Lineage.open(clone)
    path = lin.create_version("v1", ["v0"])
    (path / "recipe.yaml").write_text((path / "recipe.yaml").read_text().replace("max_new_tokens: 4", "max_new_tokens: 8"))
    sha = lin.commit_version("v1", "v1: longer", "rollout.max_new_tokens")
    assert h.git(clone, "log", "-1", "--format=%an <%ae>", sha) == "EvoTrainer <evo@localhost>"
    ok("prune", "v1", "--reason", "a write through the CLI in the clone", "-C", clone)


def test_compare_and_diff_both_take_old_then_new_and_say_so():
    compare_help = ok("compare", "--help").output
    diff_help = ok("diff", "--help").output
    assert "compare [OPTIONS] BASELINE CANDIDATE" in compare_help and "Old first, then new" in compare_help
    assert "diff [OPTIONS] A B" in diff_help and "A (old) and B (new)" in diff_help


def test_diff_shows_the_parents_effective_value_not_none(lin, ws, h):
    recipe = (ws / "recipe.yaml").read_text()
    assert "truncation_mask" not in recipe

    def edit(path):
        text = (path / "recipe.yaml").read_text()
        (path / "recipe.yaml").write_text(text + "filters:\n  truncation_mask: true\n" if "filters:" not in text
                                          else text.replace("filters:\n", "filters:\n  truncation_mask: true\n", 1))

    h.make_version(lin, "v1", ["v0"], edit=edit)
    data = json.loads(ok("diff", "v0", "v1", "--json", "-C", ws).output)
    change = next(c for c in data["recipe"]["changes"] if c["key"] == "filters.truncation_mask")
    assert change["v0"] is False and change["v1"] is True
    assert "filters.truncation_mask: False → True" in ok("diff", "v0", "v1", "-C", ws).output


def test_errors_name_the_file_actually_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sub = tmp_path / "experiments"
    sub.mkdir()
    (sub / "lr.yaml").write_text("domain: {name: arithmetic}\nmodel: {name: builtin:tiny-char}\ngrpo: {learning_rate: -1}\n")
    line = evo("train", "experiments/lr.yaml").output.strip()
    assert line.startswith("Error: experiments/lr.yaml: grpo.learning_rate: -1 is invalid"), line
    line = evo("init", tmp_path / "ws", "--recipe", sub / "lr.yaml").output.strip()
    assert "experiments/lr.yaml: grpo.learning_rate" in line and not (tmp_path / "ws").exists()


def test_validate_names_the_workspace_file_from_a_subfolder(ws, monkeypatch):
    (ws / "recipe.yaml").write_text((ws / "recipe.yaml").read_text() + "bogus: 1\n")
    monkeypatch.chdir(ws / "analyzers")
    result = evo("validate")
    assert result.exit_code == 1 and result.output.strip() == (
        f"Error: {ws / 'recipe.yaml'}: bogus: unknown key; remove it or check its spelling")
    monkeypatch.chdir(ws)
    assert evo("validate").output.strip() == "Error: recipe.yaml: bogus: unknown key; remove it or check its spelling"
    assert subprocess.run(["git", "status", "--porcelain"], cwd=ws, capture_output=True, text=True).stdout.strip() == \
        "M recipe.yaml"
