"""Fixtures for report tests: one real workspace, built once per session (see `workspace`).

Training is the expensive part, so it happens here only, and every test reads
this workspace (or a copy).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # report_support, wandb_records for the test modules

from report_support import RECIPE, evo, evo_json  # noqa: E402


def patch_settings(root: Path, patch: dict, message: str) -> None:
    """Update sections of evo.yaml and commit it on main, as a user would."""
    settings = yaml.safe_load((root / "evo.yaml").read_text())
    for section, values in patch.items():
        settings.setdefault(section, {}).update(values)
    (root / "evo.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    subprocess.run(["git", "commit", "-qam", message], cwd=root, check=True)


def fast_search() -> dict:
    """One alternative beside the head; one calibration seed where the judge has that setting."""
    from evo.schemas import load_schema

    search = {"frontier_size": 1}
    if "calibration_seeds" in load_schema("settings")["properties"]["search"]["properties"]:
        search["calibration_seeds"] = 1
    return search


@pytest.fixture(scope="session")
def workspace(tmp_path_factory) -> dict:
    """The shared workspace: {root, rows (`evo log --json`), merged, merge_parents, rejected, waiting}.

    Two trained steps (a promotion; the heuristic revises the harness when
    evidence is short), then the cost gate closed so the next candidates stop
    before training: one is rejected (pruned, as `evo reject` does), one is
    left awaiting approval; finally `evo merge` of the head and another live
    version. Every state the page draws is present, for the cost of two
    trained steps.
    """
    base = tmp_path_factory.mktemp("report")
    (base / "recipe.yaml").write_text(RECIPE)
    root = base / "ws"
    evo("init", root, "--recipe", base / "recipe.yaml")
    patch_settings(root, {"search": fast_search()}, "settings for the report tests")
    for _ in range(2):
        evo("step", "-C", root)
    patch_settings(root, {"gate": {"approval_above_gpu_hours": 0.0}}, "every candidate waits for approval")
    rejected = evo_json("step", "-C", root)
    assert rejected["status"] == "awaiting-approval", rejected
    evo("reject", "-C", root, rejected["version"], "--reason", "not worth it")
    waiting = evo_json("step", "-C", root)
    assert waiting["status"] == "awaiting-approval", waiting
    rows = evo_json("log", "-C", root)["versions"]
    head = next(r["name"] for r in reversed(rows) if r["state"] == "promoted")
    other = next(r["name"] for r in reversed(rows) if r["state"] in ("promoted", "frontier") and r["name"] != head)
    evo("merge", "-C", root, head, other, "--reason", "combine the head with the other live version")
    rows = evo_json("log", "-C", root)["versions"]
    assert rows[-1]["parents"] == [head, other]
    return {"root": root, "rows": rows, "merged": rows[-1]["name"], "merge_parents": [head, other],
            "rejected": rejected["version"], "waiting": waiting["version"]}


@pytest.fixture
def workspace_copy(workspace, tmp_path) -> Path:
    dst = tmp_path / "ws"
    shutil.copytree(workspace["root"], dst, symlinks=True)
    return dst
