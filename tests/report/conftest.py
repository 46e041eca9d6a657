"""Fixtures for report tests: one real workspace, built once per session (see `workspace`).

Training is the expensive part, so it happens here only, and every test reads
this workspace (or a copy).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from report_support import evo, evo_json, fast_search, init_workspace, patch_settings


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
    root = init_workspace(tmp_path_factory.mktemp("report") / "ws", settings_patch={"search": fast_search()})
    for _ in range(2):
        evo("step", "-C", root)
    patch_settings(root, {"gate": {"approval_above_gpu_hours": 0.0}})  # every later candidate waits for approval
    rejected = evo_json("step", "-C", root)
    assert rejected["status"] == "awaiting-approval", rejected
    evo("reject", "-C", root, rejected["version"], "--reason", "not worth it")
    for _ in range(3):  # a candidate whose runs are all reused (a re-test) trains nothing and passes the gate
        waiting = evo_json("step", "-C", root)
        if waiting["status"] == "awaiting-approval":
            break
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
