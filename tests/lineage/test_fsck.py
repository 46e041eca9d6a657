"""`evo fsck`: each kind of damage is reported once, with its fix, and `--repair` undoes the safe ones.

Every test damages a real workspace (real git, real files) the way a user or a
killed process would, then checks the report, the exit status, and what the
repair leaves: the refs, notes and files of a healthy workspace.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

from click.testing import CliRunner

from evo.cli import main
from evo.lineage import Lineage, fsck
from evo.settings import artifact_dir, artifact_root, load_settings


def evo(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # a handled error, not a crash
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def kinds(root, **kw) -> list[str]:
    return [p.kind for p in fsck.check(root, **kw)]


def record_run(lin: Lineage, ws, version: str, *, files=None, event: dict | None = None, run: str | None = None) -> dict:
    """Write run files and the event that records them, as the loop's run phase does."""
    settings = load_settings(ws)
    folder = artifact_root(ws, settings) / run if run else artifact_dir(ws, settings, version)
    files = files or {"checkpoint/model.safetensors": b"w" * 4096, "rollouts.parquet": b"r" * 512,
                      "summary.json": b"{}"}
    artifacts = []
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        artifacts.append({"name": name, "uri": path.resolve().as_uri(), "size": len(data),
                          "sha256": hashlib.sha256(data).hexdigest()})
    ev = dict(event or {"event": "trained", "metrics": {}}, artifacts=artifacts)
    if run:
        ev["run"] = run
    lin.append_event(version, ev)
    return ev


def promoted_v1(lin, ws, h) -> str:
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    lin.promote("v1", "better")
    lin.remove_worktree("v1")  # as a finished step leaves it
    return h.git(ws, "rev-parse", "evo/v1")


def test_a_healthy_workspace_has_no_problems_and_exits_0(lin, ws, h):
    promoted_v1(lin, ws, h)
    record_run(lin, ws, "v1")
    assert fsck.check(ws, hashes="all") == []
    result = evo("fsck", "-C", ws)
    assert result.exit_code == 0 and result.output.startswith("ok:"), result.output
    data = json.loads(evo("fsck", "-C", ws, "--json").output)
    assert data["ok"] is True and data["problems"] == []


def test_deleted_promoted_branch_is_named_and_restored(lin, ws, h):
    head = promoted_v1(lin, ws, h)
    h.git(ws, "branch", "-D", "evo/v1")
    line = one_line_error(evo("show", "v1", "-C", ws))
    assert "evo/v1 is missing" in line and "evo fsck --repair" in line
    result = evo("fsck", "-C", ws)
    assert result.exit_code == 1
    assert result.output.splitlines()[0].startswith("branch-missing: v1 is promoted")
    assert "`evo fsck --repair` restores refs/heads/evo/v1" in result.output
    repaired = evo("fsck", "--repair", "-C", ws)
    assert repaired.exit_code == 0, repaired.output
    assert h.git(ws, "rev-parse", "evo/v1") == head
    assert evo("show", "v1", "-C", ws).exit_code == 0


def test_notes_ref_at_a_blob_is_one_line_not_an_empty_lineage_and_is_restored(lin, ws, h):
    promoted_v1(lin, ws, h)
    before = h.snapshot(ws)
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=ws, input="hi\n", text=True,
                          capture_output=True, check=True).stdout.strip()
    h.git(ws, "update-ref", "refs/notes/evo/lineage", blob)
    for command in (("log",), ("status",), ("show", "v1")):
        line = one_line_error(evo(*command, "-C", ws))
        assert "refs/notes/evo/lineage points at a blob" in line and "evo fsck" in line
    problems = fsck.check(ws)
    assert [p.kind for p in problems] == ["notes-ref"] and problems[0].repairable
    assert evo("fsck", "--repair", "-C", ws).exit_code == 0
    after = h.snapshot(ws)
    assert after["refs"] == before["refs"] and after["notes"] == before["notes"]
    assert [r["name"] for r in json.loads(evo("log", "--json", "-C", ws).output)["versions"]] == ["v0", "v1"]


def test_notes_ref_reset_to_an_unrelated_commit_is_caught(lin, ws, h):
    before = h.snapshot(ws)
    h.git(ws, "update-ref", "refs/notes/evo/lineage", "main")
    assert kinds(ws) == ["notes-ref"]
    assert evo("fsck", "--repair", "-C", ws).exit_code == 0
    assert h.snapshot(ws)["notes"] == before["notes"]


def test_half_made_version_from_an_interrupted_dry_run_is_discarded(lin, ws, h):
    before = h.snapshot(ws)
    lin.create_version("v1", ["v0"])  # branch + worktree, no commit of its own, no journal
    assert kinds(ws) == ["half-made"]  # its worktree is part of it, not a second problem
    assert evo("fsck", "--repair", "-C", ws).exit_code == 0
    after = h.snapshot(ws)
    assert after["refs"] == before["refs"] and after["worktrees"] == before["worktrees"]
    assert not (ws / ".evo" / "worktrees" / "v1").exists()


def test_the_in_flight_steps_version_is_not_half_made(lin, ws, h):
    lin.create_version("v1", ["v0"])
    journal = ws / ".evo" / "journal" / "current.json"
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text(json.dumps({"version": "v1", "parents": ["v0"], "phase": "propose", "phases_done": ["observe"]}))
    assert fsck.check(ws) == []
    journal.write_text("{not json")
    problems = fsck.check(ws)
    assert [p.kind for p in problems] == ["journal", "half-made"]
    assert "current.json is unreadable" in problems[0].message and "rm .evo/journal/current.json" in problems[0].fix


def test_orphan_and_stale_worktrees(lin, ws, h):
    sha = h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    lin.prune("v1", "worse")
    h.git(ws, "worktree", "add", "--detach", ".evo/worktrees/v1", sha)  # a worktree for a pruned version
    h.make_version(lin, "v2", ["v0"], edit=h.set_recipe_value("temperature: 1.0", "temperature: 0.7"))
    shutil.rmtree(ws / ".evo" / "worktrees" / "v2")  # registered, folder gone
    problems = fsck.check(ws)
    assert sorted(p.kind for p in problems) == ["worktree-orphan", "worktree-stale"]
    orphan = next(p for p in problems if p.kind == "worktree-orphan")
    assert orphan.subject == "v1" and "pruned version" in orphan.message
    assert evo("fsck", "--repair", "-C", ws).exit_code == 0
    assert "worktrees/v1" not in h.git(ws, "worktree", "list") and "worktrees/v2" not in h.git(ws, "worktree", "list")
    assert h.git(ws, "rev-parse", "refs/evo/pruned/v1") == sha  # the pruned version itself stays


def test_deleted_pruned_ref_and_tag_are_restored_from_the_lineage(lin, ws, h):
    sha = h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    lin.prune("v1", "worse")
    h.git(ws, "update-ref", "-d", "refs/evo/pruned/v1")
    promoted_tag = h.git(ws, "rev-parse", "evo/promoted/v0^{commit}")
    h.git(ws, "tag", "-d", "evo/promoted/v0")
    assert sorted(kinds(ws)) == ["refs-missing", "tag-missing"]  # no spurious main problem while refs are off
    assert evo("fsck", "--repair", "-C", ws).exit_code == 0
    assert h.git(ws, "rev-parse", "refs/evo/pruned/v1") == sha
    assert h.git(ws, "rev-parse", "evo/promoted/v0^{commit}") == promoted_tag
    assert lin.record("v1").state == "pruned" and lin.record("v0").state == "promoted"


def test_missing_and_changed_artifacts_of_any_event(lin, ws, h):
    promoted_v1(lin, ws, h)
    record_run(lin, ws, "v1")
    record_run(lin, ws, "v0", run="controls/v0/steps3-seed0",
               event={"event": "control", "key": "steps3-seed0", "steps": 3, "seed": 0, "avg_at_k": 0.5})
    v1 = artifact_dir(ws, load_settings(ws), "v1")
    (v1 / "rollouts.parquet").unlink()
    weights = v1 / "checkpoint" / "model.safetensors"
    weights.write_bytes(b"x" * weights.stat().st_size)  # same size, other bytes
    control = artifact_root(ws, load_settings(ws)) / "controls" / "v0" / "steps3-seed0" / "summary.json"
    control.unlink()
    problems = fsck.check(ws)  # hashes="head": v1 is the promoted head
    assert sorted((p.kind, p.subject) for p in problems) == [
        ("artifact-changed", "v1"), ("artifact-missing", "v0"), ("artifact-missing", "v1")]
    changed = next(p for p in problems if p.kind == "artifact-changed")
    assert "checkpoint/model.safetensors: sha256 differs" in changed.message
    missing = next(p for p in problems if p.subject == "v0")
    assert "controls/v0/steps3-seed0" in missing.message and "summary.json" in missing.message
    assert not any(p.repairable for p in problems)
    assert [p.kind for p in fsck.check(ws, hashes="none")].count("artifact-changed") == 0  # sizes only


def test_deleted_artifact_root_is_one_line(lin, ws, h):
    promoted_v1(lin, ws, h)
    record_run(lin, ws, "v0")
    record_run(lin, ws, "v1")
    shutil.rmtree(ws / ".evo")
    result = evo("fsck", "-C", ws)
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == (
        "artifact-missing: the artifact root .evo/artifacts is missing: all 6 artifacts the lineage records for v0, v1 "
        "are gone; restore .evo/artifacts from a backup, or set artifacts.root in evo.yaml to where it is")
    assert len(result.output.splitlines()) == 2  # the problem and the count


def test_memory_left_uncommitted_is_recommitted(lin, ws, h):
    notes_file = ws / "memory" / "search_notes.md"
    notes_file.write_text(notes_file.read_text() + "- v1: tried a longer limit\n")
    assert kinds(ws) == ["memory-uncommitted"]
    assert evo("fsck", "--repair", "-C", ws).exit_code == 0
    assert h.git(ws, "status", "--porcelain") == ""
    assert h.git(ws, "log", "-1", "--format=%s").startswith("evo: record")
    assert "tried a longer limit" in h.git(ws, "show", "HEAD:memory/search_notes.md")


def test_a_users_recipe_edit_is_not_memory_and_not_recommitted(lin, ws, h):
    recipe = ws / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("max_new_tokens: 4", "max_new_tokens: 6"))
    assert fsck.check(ws) == []  # dirty main is `evo step`'s own refusal, not an inconsistency
    evo("fsck", "--repair", "-C", ws)
    assert h.git(ws, "status", "--porcelain") == "M recipe.yaml"


def test_a_commit_on_main_that_changes_the_recipe_is_reported_but_evo_records_are_not(lin, ws, h):
    promoted_v1(lin, ws, h)
    skill = next((ws / "skills").glob("*/SKILL.md"))
    skill.write_text(skill.read_text().replace("---\n", "---\nevidence: [{version: v1, outcome: improvement}]\n", 1)
                     if "evidence:" not in skill.read_text() else skill.read_text())
    lin.commit_main("evo: record v1", ["skills"])  # the record phase's own commit
    assert fsck.check(ws) == []
    recipe = ws / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("max_new_tokens: 8", "max_new_tokens: 12"))
    h.git(ws, "commit", "-qam", "try 12 tokens")
    problems = fsck.check(ws)
    assert [p.kind for p in problems] == ["main-edited"]
    assert "recipe.yaml" in problems[0].message and "'try 12 tokens'" in problems[0].message
    assert not problems[0].repairable


def test_fsck_json_and_exit_status(lin, ws, h):
    lin.create_version("v1", ["v0"])
    result = evo("fsck", "--json", "-C", ws)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["ok"] is False and [p["kind"] for p in data["problems"]] == ["half-made"]
    assert data["problems"][0]["repairable"] is True and data["repaired"] == []
    fixed = json.loads(evo("fsck", "--repair", "--json", "-C", ws).output)
    assert fixed["ok"] is True and fixed["repaired"] == ["discarded half-made v1"]


def test_require_consistent_names_the_first_problem_and_evo_fsck(lin, ws, h):
    import pytest

    from evo.errors import WorkspaceError

    fsck.require_consistent(ws)
    lin.create_version("v1", ["v0"])
    with pytest.raises(WorkspaceError, match=r"inconsistent: v1 is a half-made version .*; run `evo fsck`"):
        fsck.require_consistent(ws)
    fsck.require_consistent(ws, ignore=("half-made",))
