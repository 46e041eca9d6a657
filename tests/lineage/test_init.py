"""`evo init`: what a new workspace holds, and the folders it refuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from evo.cli import main
from evo.errors import WorkspaceError
from evo.lineage import Lineage
from evo.recipe import load_recipe
from evo.resources import resource_dir
from evo.settings import load_settings
from evo.workspace import init_workspace


def test_init_creates_the_baseline_workspace(ws, h):
    for name in ("evo.yaml", "recipe.yaml", "CLAUDE.md", "AGENTS.md", ".gitignore",
                 "memory/lineage.md", "memory/recurring_cases.md", "memory/negative_evidence.md",
                 "memory/search_notes.md"):
        assert (ws / name).is_file(), name
    for folder in ("analyzers", "skills", "trainer_prompts"):
        assert (ws / folder).is_dir()
    # Whatever built-ins exist are copied, without caches.
    for folder in ("analyzers", "skills"):
        shipped = sorted(p.name for p in resource_dir(folder).iterdir() if p.name != "__pycache__")
        assert sorted(p.name for p in (ws / folder).iterdir() if p.name != ".gitkeep") == shipped
    assert not list(ws.rglob("__pycache__"))
    assert ".evo/" in (ws / ".gitignore").read_text()
    assert "Avg@k" in (ws / "AGENTS.md").read_text() and "manifest" in (ws / "AGENTS.md").read_text()

    settings = load_settings(ws)
    assert (settings["domain"], settings["model"], settings["agent"]["backend"]) == ("arithmetic", "builtin:tiny-char", "heuristic")
    assert load_recipe(ws / "recipe.yaml")["domain"]["name"] == "arithmetic"

    # Baseline committed on main, clean, v0 branch + promotion tag at it, with trailers.
    assert h.git(ws, "symbolic-ref", "--short", "HEAD") == "main"
    assert h.git(ws, "status", "--porcelain") == ""
    head = h.git(ws, "rev-parse", "HEAD")
    assert h.git(ws, "rev-parse", "evo/v0") == head
    assert h.git(ws, "rev-parse", "evo/promoted/v0^{commit}") == head
    assert h.git(ws, "cat-file", "-t", "evo/promoted/v0") == "tag"  # annotated
    assert "Evo-Version: v0" in h.git(ws, "show", "-s", "--format=%B", head)
    assert "evo.yaml" in h.git(ws, "ls-files")

    rec = Lineage.open(ws).record("v0")
    assert rec.state == "promoted" and rec.parents == [] and rec.commit == head
    assert [e["event"] for e in rec.events] == ["created", "promoted"]

    config = h.git(ws, "config", "--local", "--list")
    assert "notes.rewriteref=refs/notes/evo/lineage" in config
    assert "notes.rewrite.amend=true" in config and "notes.rewrite.rebase=true" in config
    assert "notes.evo/lineage.mergestrategy=cat_sort_uniq" in config
    assert "user.name=EvoTrainer" in config and "user.email=evo@localhost" in config


def test_init_keeps_an_existing_identity_and_sets_model(tmp_path, h):
    Path(os.environ["GIT_CONFIG_GLOBAL"]).write_text("[user]\n\tname = Ada\n\temail = ada@example.org\n")
    root = init_workspace(tmp_path / "w", model="Qwen/Qwen2.5-0.5B-Instruct", agent="claude")
    assert "user.name" not in h.git(root, "config", "--local", "--list")
    assert h.git(root, "log", "-1", "--format=%an <%ae>") == "Ada <ada@example.org>"
    assert load_recipe(root / "recipe.yaml")["model"]["name"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert "# The embedded default" in (root / "recipe.yaml").read_text()  # comments survive
    settings = load_settings(root)
    assert settings["model"] == "Qwen/Qwen2.5-0.5B-Instruct" and settings["agent"]["backend"] == "claude"


def test_rerunning_init_says_so_and_changes_nothing(ws, h):
    before = h.snapshot(ws)
    result = CliRunner().invoke(main, ["init", str(ws)])
    assert result.exit_code == 0, result.output
    assert "already an EvoTrainer workspace" in result.output
    assert h.snapshot(ws) == before
    with pytest.raises(WorkspaceError, match="already an EvoTrainer workspace"):
        init_workspace(ws, force=True)
    assert h.snapshot(ws) == before


def test_rerunning_init_with_another_domain_is_an_error_not_a_silent_no_op(ws, h):
    before = h.snapshot(ws)
    result = CliRunner().invoke(main, ["init", str(ws), "--domain", "patch"])
    assert result.exit_code != 0
    assert "already an EvoTrainer workspace; --domain patch not applied" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert h.snapshot(ws) == before


def test_non_empty_folder_needs_force(tmp_path, h):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "todo.txt").write_text("mine\n")
    result = CliRunner().invoke(main, ["init", str(root)])
    assert result.exit_code == 1
    assert "is not empty" in result.output and "--force" in result.output and "todo.txt" in result.output
    assert sorted(p.name for p in root.iterdir()) == ["todo.txt"]  # untouched

    result = CliRunner().invoke(main, ["init", str(root), "--force"])
    assert result.exit_code == 0, result.output
    assert (root / "todo.txt").read_text() == "mine\n"
    assert Lineage.open(root).record("v0").state == "promoted"


def test_unknown_domain_lists_the_available_ones_and_writes_nothing(tmp_path):
    result = CliRunner().invoke(main, ["init", str(tmp_path / "w"), "--domain", "chess"])
    assert result.exit_code == 1
    line = result.output.strip().splitlines()[-1]
    assert "'chess'" in line and "arithmetic" in line
    assert not (tmp_path / "w").exists()


def test_init_adopts_an_empty_clone_and_configures_its_remote(tmp_path, h):
    h.git(tmp_path, "init", "-q", "--bare", "--initial-branch=main", "remote.git")
    h.git(tmp_path, "clone", "-q", "remote.git", "ws")
    root = init_workspace(tmp_path / "ws")
    pushes = h.git(root, "config", "--get-all", "remote.origin.push").splitlines()
    assert "refs/notes/evo/*:refs/notes/evo/*" in pushes and "refs/heads/main:refs/heads/main" in pushes
    fetches = h.git(root, "config", "--get-all", "remote.origin.fetch").splitlines()
    assert "refs/notes/evo/*:refs/notes/evo/*" in fetches
    assert "+refs/heads/*:refs/remotes/origin/*" in fetches  # the clone's own refspec is kept


def test_a_git_folder_with_history_needs_force(tmp_path, h):
    root = tmp_path / "old"
    root.mkdir()
    h.git(root, "init", "-q", "-b", "trunk")
    h.git(root, "-c", "user.name=x", "-c", "user.email=x@y", "commit", "-q", "--allow-empty", "-m", "old")
    with pytest.raises(WorkspaceError, match="git history"):
        init_workspace(root)
    init_workspace(root, force=True)
    assert h.git(root, "symbolic-ref", "--short", "HEAD") == "main"
    assert h.git(root, "log", "--format=%s", "main").splitlines()[-1] == "old"  # history kept


def test_malformed_settings_name_the_file_path_value_and_fix(ws, h):
    text = (ws / "evo.yaml").read_text().replace("backend: \"heuristic\"", "backend: \"gpt\"")
    assert "gpt" in text
    (ws / "evo.yaml").write_text(text)
    before = h.snapshot(ws)
    result = CliRunner().invoke(main, ["status", "-C", str(ws)])
    assert result.exit_code == 1
    msg = result.output.strip()
    assert len(msg.splitlines()) == 1
    assert "evo.yaml" in msg and "agent.backend" in msg and "'gpt'" in msg and "use one of" in msg
    (ws / "evo.yaml").write_text("domain: [unclosed\n")
    result = CliRunner().invoke(main, ["status", "-C", str(ws)])
    assert result.exit_code == 1 and "evo.yaml" in result.output and "line" in result.output
    assert h.snapshot(ws)["refs"] == before["refs"]


def test_settings_template_renders_valid_yaml_for_odd_model_ids(tmp_path):
    from evo.workspace import render_settings

    text = render_settings("arithmetic", "local: path/with #hash", "command")
    assert yaml.safe_load(text)["model"] == "local: path/with #hash"


def test_init_from_a_given_recipe_takes_its_domain(tmp_path):
    given = tmp_path / "mine.yaml"
    given.write_text((resource_dir("recipes") / "math-tiny.yaml").read_text())
    result = CliRunner().invoke(main, ["init", str(tmp_path / "clash"), "--recipe", str(given), "--domain", "arithmetic"])
    assert result.exit_code == 1 and "'math'" in result.output and "'arithmetic'" in result.output
    assert not (tmp_path / "clash").exists()
    root = init_workspace(tmp_path / "w", recipe=given)
    assert load_settings(root)["domain"] == "math"
    assert (root / "recipe.yaml").read_text() == given.read_text()
