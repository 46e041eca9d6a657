"""`evo fsck --repair` on a really trained workspace damaged several ways leaves one `evo step` can run on."""

from __future__ import annotations

import json

from loop_support import copy_workspace, evo, evo_json

from evo.lineage import Lineage


def test_fsck_reports_each_damage_once_and_after_repair_evo_step_runs(stepped, tmp_path):
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    lin = Lineage.open(root)
    assert evo("fsck", "-C", root).returncode == 0
    head = evo_json("status", "-C", root)["promoted"]["name"]
    head_commit = lin.head(head)
    scratch = lin.next_version()
    lin.create_version(scratch, [head])                         # a dry run killed after creating its candidate
    lin.repo.git.branch("-D", f"evo/{head}")                    # a user deletes the promoted branch
    notes = root / "memory" / "search_notes.md"                 # a record killed before its commit
    notes.write_text(notes.read_text() + f"- {head}: a note the killed record wrote\n")

    proc = evo("fsck", "--json", "-C", root, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    found = sorted(p["kind"] for p in json.loads(proc.stdout)["problems"])
    assert found == ["branch-missing", "half-made", "memory-uncommitted"]
    step = evo("step", "-C", root, check=False)  # refused before repair, in one line
    assert step.returncode == 1 and len(step.stderr.strip().splitlines()) == 1, step.stderr

    repaired = evo("fsck", "--repair", "-C", root, check=False)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert lin.head(head) == head_commit and scratch not in lin.versions()
    assert lin.dirty_paths() == []

    after = evo("step", "-C", root, check=False)
    assert after.returncode == 0, after.stdout + after.stderr
    assert "status: done" in after.stdout or "status: nothing-to-do" in after.stdout
    assert evo("fsck", "-C", root).returncode == 0
