"""Fixtures for the trainer-agent tests: a worktree holding a recipe, settings, and a context factory.

Diagnoses are crafted dicts in the diagnosis.json format (docs/contracts.md);
the built-in skills and prompts are the shipped ones.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evo.agent import AgentContext
from evo.agent.memory import Memory
from evo.agent.skills import load_skills
from evo.recipe import load_recipe, set_path
from evo.resources import resource_dir
from evo.settings import normalize_settings
from evo.yamlio import dump_yaml, load_yaml

BASELINE = resource_dir("recipes") / "arithmetic-tiny.yaml"


def finding(fid: str, severity: str = "warning", message: str = "", rows=()) -> dict:
    return {"id": fid, "layer": fid.split(".")[0], "severity": severity, "message": message or fid,
            "evidence": {"rows": list(rows), "values": {}}}


def diagnosis(metrics: dict, findings=(), version: str = "v0") -> dict:
    return {"version": version, "harness_version": "abc123abc123", "metrics": dict(metrics),
            "findings": list(findings), "analyzers": [], "audits": {"vetoed": False, "vetoes": []}}


@pytest.fixture
def settings():
    return normalize_settings({"domain": "arithmetic", "model": "builtin:tiny-char"})


@pytest.fixture
def worktree(tmp_path):
    """A candidate worktree holding the embedded default's baseline recipe (max_new_tokens 4, no filters)."""
    wt = tmp_path / "wt"
    wt.mkdir()
    shutil.copy(BASELINE, wt / "recipe.yaml")
    return wt


def set_recipe(worktree: Path, **changes) -> dict:
    """Rewrite the worktree's recipe with dotted-path changes, e.g. {"rollout.max_new_tokens": 64}."""
    raw = load_yaml(worktree / "recipe.yaml")
    for dotted, value in changes.items():
        raw = set_path(raw, dotted, value)
    (worktree / "recipe.yaml").write_text(dump_yaml(raw))
    return load_recipe(worktree / "recipe.yaml")


@pytest.fixture
def make_ctx(worktree, settings, tmp_path):
    def make(diag: dict, *, skills=None, lineage=(), last_outcome=None, harness_revised=False, phase=None,
             memory=None, domain="arithmetic", root=None, parent="v0"):
        outcome = (last_outcome or {}).get("outcome")
        return AgentContext(
            phase=phase or ("reflect" if outcome in ("mixed", "insufficient") else "propose"),
            root=root or tmp_path, worktree=worktree, version="v9", parent=parent, domain=domain,
            recipe=load_recipe(worktree / "recipe.yaml"), diagnosis=diag, settings=settings,
            last_outcome=last_outcome, lineage=list(lineage),
            memory=memory if memory is not None else Memory.load(root or tmp_path),
            skills=load_skills() if skills is None else skills, harness_revised=harness_revised)

    return make


def skill_named(name: str):
    return next(s for s in load_skills() if s.name == name)


@pytest.fixture
def kit():
    """Helpers as one fixture (test modules cannot import conftest under --import-mode=importlib)."""
    from types import SimpleNamespace

    return SimpleNamespace(finding=finding, diagnosis=diagnosis, set_recipe=set_recipe, skill_named=skill_named)
