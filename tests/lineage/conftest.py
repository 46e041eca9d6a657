"""Fixtures for lineage tests: real git repositories in temporary folders.

Every test runs with an isolated git configuration (no global or system
config), so a test's identity and settings come only from what `evo init`
writes. One workspace is initialised per session and copied per test, which
keeps the folder well inside its time budget.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from unittest import mock

import pytest

from evo.lineage import Lineage


def isolated_git_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    empty = home / "empty.gitconfig"
    empty.write_text("")
    env = {"HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(empty),
           "GIT_TERMINAL_PROMPT": "0"}
    return env


_IDENTITY_VARS = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_TRACE",
                  "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")


@pytest.fixture(autouse=True)
def git_env(tmp_path_factory, monkeypatch):
    env = isolated_git_env(tmp_path_factory.mktemp("home"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in _IDENTITY_VARS:
        monkeypatch.delenv(key, raising=False)
    return env


@pytest.fixture(scope="session")
def _pristine_workspace(tmp_path_factory) -> Path:
    from evo.workspace import init_workspace

    base = tmp_path_factory.mktemp("pristine")
    env = isolated_git_env(base / "home")
    with mock.patch.dict(os.environ, env):
        for key in _IDENTITY_VARS:
            os.environ.pop(key, None)
        return init_workspace(base / "ws")


@pytest.fixture
def ws(_pristine_workspace, tmp_path) -> Path:
    """A fresh, initialised workspace (a copy of one made by `evo init`)."""
    root = tmp_path / "ws"
    shutil.copytree(_pristine_workspace, root, symlinks=True)
    return root


@pytest.fixture
def lin(ws) -> Lineage:
    return Lineage.open(ws)


def git(cwd: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout.strip()


def snapshot(root: Path) -> dict:
    """Everything a failed command must leave untouched: refs, notes, config, tree."""
    notes = git(root, "notes", "--ref", "evo/lineage", "list")
    return {
        "refs": git(root, "for-each-ref", "--format=%(refname) %(objectname)"),
        "notes": {line.split()[1]: git(root, "notes", "--ref", "evo/lineage", "show", line.split()[1])
                  for line in notes.splitlines()},
        "status": git(root, "status", "--porcelain", "--untracked-files=all"),
        "head": git(root, "rev-parse", "HEAD"),
        "branch": git(root, "symbolic-ref", "--short", "HEAD"),
        "worktrees": git(root, "worktree", "list", "--porcelain"),
        "config": git(root, "config", "--local", "--list"),
        "files": sorted(str(p.relative_to(root)) for p in root.rglob("*")
                        if ".git" not in p.relative_to(root).parts and ".evo" not in p.relative_to(root).parts),
    }


def make_version(lin: Lineage, version: str, parents: list[str], *, edit=None, intervention: str | None = None,
                 created: bool = True) -> str:
    """Create, edit, commit and record a version the way the loop does; returns its commit."""
    path = lin.create_version(version, parents)
    if edit:
        edit(path)
    sha = lin.commit_version(version, f"{version}: {intervention or 'change'}", intervention)
    if created:
        lin.append_event(version, {"event": "created", "parents": parents, "branch": f"evo/{version}", "commit": sha,
                                   "intervention": intervention, "agent": "heuristic", "id": f"{version}-created"})
    return sha


def set_recipe_value(old: str, new: str):
    """An `edit` callback replacing text in the version's recipe.yaml."""
    def edit(path: Path) -> None:
        recipe = path / "recipe.yaml"
        text = recipe.read_text()
        assert old in text, f"{old!r} not in recipe"
        recipe.write_text(text.replace(old, new))
    return edit


def judged(value: float, delta: float, outcome: str = "improvement", baseline: str = "v0") -> dict:
    return {"event": "judged", "baseline": baseline, "outcome": outcome,
            "headline": {"metric": "score/avg_at_k", "value": value, "delta": delta,
                         "ci_low": delta - 0.02, "ci_high": delta + 0.02, "p_value": 0.01}, "vetoes": []}


@pytest.fixture
def h():
    """The helpers above, for test modules (importlib mode cannot import conftest)."""
    from types import SimpleNamespace

    return SimpleNamespace(git=git, snapshot=snapshot, make_version=make_version, set_recipe_value=set_recipe_value,
                           judged=judged)
