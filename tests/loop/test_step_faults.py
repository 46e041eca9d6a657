"""Faults around a step that once ran, lost or corrupted work: each is now one line or a clean resume."""

from __future__ import annotations

import shutil
import subprocess

from loop_support import copy_workspace, evo, evo_json


def _git(root, *args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True).stdout


def _refs_and_notes(root):
    return _git(root, "for-each-ref"), _git(root, "log", "-p", "--format=%H", "refs/notes/evo/lineage"), \
        _git(root, "status", "--porcelain"), _git(root, "worktree", "list")


def test_dry_run_with_a_step_in_flight_changes_nothing(stepped, tmp_path):
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    proc = evo("step", "-C", root, env={"EVO_FAULT_KILL_AT": "run"}, check=False)
    assert proc.returncode == -9
    before = _refs_and_notes(root), sorted(p.name for p in (root / ".evo" / "artifacts").iterdir())
    journal = (root / ".evo/journal/current.json").read_text()
    data = evo_json("step", "-C", root, "--dry-run")
    assert data["status"] == "dry-run" and "in flight" in data["message"] and "v2" in data["message"]
    assert (_refs_and_notes(root), sorted(p.name for p in (root / ".evo" / "artifacts").iterdir())) == before
    assert (root / ".evo/journal/current.json").read_text() == journal
    assert "status: done" in evo("step", "-C", root).stdout  # the real step resumes it


def test_a_step_killed_while_recording_resumes_to_a_clean_main(stepped, tmp_path):
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    proc = evo("step", "-C", root, env={"EVO_FAULT_KILL_AT": "record:mid"}, check=False)
    assert proc.returncode == -9 and _git(root, "status", "--porcelain").strip(), "memory written, not committed"
    assert "status: done" in evo("step", "-C", root).stdout
    assert _git(root, "status", "--porcelain").strip() == ""
    assert "evo: record v2" in _git(root, "log", "--format=%s", "main")
    assert "status: done" in evo("step", "-C", root).stdout, "the next step is not refused for a dirty main"


def test_deleted_artifacts_are_refused_not_silently_retrained(stepped, tmp_path):
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    shutil.rmtree(root / ".evo")
    before = _refs_and_notes(root)
    proc = evo("step", "-C", root, check=False)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "evo fsck" in proc.stderr and "v1" in proc.stderr
    assert _refs_and_notes(root) == before and not (root / ".evo" / "artifacts" / "v0").exists()


def test_a_judged_step_is_logged_to_the_configured_tracker(stepped, tmp_path):
    import pytest

    pytest.importorskip("tensorboard")
    from loop_support import patch_settings
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = copy_workspace(stepped["root"], tmp_path / "ws")
    patch_settings(root, {"logging": {"tensorboard": {"log_dir": "tb"}}})
    data = evo_json("step", "-C", root)
    assert data["status"] == "done" and "logged to tensorboard" in data["message"]
    runs = [p for p in (root / "tb").rglob("*") if p.is_dir() and any(f.name.startswith("events.") for f in p.iterdir())]
    acc = EventAccumulator(str(next(r for r in runs if r.name == data["version"])), size_guidance={"scalars": 0})
    acc.Reload()
    steps = [e.step for e in acc.Scalars("reward/mean")]
    logged = (root / f".evo/artifacts/{data['version']}/metrics.jsonl").read_text().splitlines()
    assert len(steps) == len(logged)
