"""Versions as branches with worktrees, commits with trailers, events in notes."""

from __future__ import annotations

import pytest

from evo.errors import LineageError, VersionError, WorkspaceError
from evo.lineage import Lineage


def test_open_refuses_non_workspaces(tmp_path, h):
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(WorkspaceError, match="is not a git repository.*evo init"):
        Lineage.open(plain)
    h.git(plain, "init", "-q")
    with pytest.raises(WorkspaceError, match=r"not an EvoTrainer workspace \(no evo.yaml\); run `evo init` there"):
        Lineage.open(plain)
    with pytest.raises(WorkspaceError, match="does not exist"):
        Lineage.open(tmp_path / "missing")


def test_open_from_a_subfolder_or_worktree_finds_the_workspace(lin, ws):
    assert Lineage.open(ws / "memory").root == ws.resolve()
    path = lin.create_version("v1", ["v0"])
    assert Lineage.open(path).root == ws.resolve()


def test_create_commit_and_resume(lin, ws, h):
    path = lin.create_version("v1", ["v0"])
    assert path == ws / ".evo" / "worktrees" / "v1" and (path / "recipe.yaml").is_file()
    assert h.git(path, "symbolic-ref", "--short", "HEAD") == "evo/v1"
    assert h.git(ws, "symbolic-ref", "--short", "HEAD") == "main"  # the root stays on main
    assert lin.create_version("v1", ["v0"]) == path  # idempotent
    (path / "recipe.yaml").write_text((path / "recipe.yaml").read_text().replace("max_new_tokens: 4", "max_new_tokens: 8"))
    (path / "analyzers" / "echo.py").write_text("def analyze(ctx):\n    return {}\n")
    assert lin.changed_paths("v1") == ["analyzers/echo.py", "recipe.yaml"]  # before the commit, untracked included

    sha = lin.commit_version("v1", "Longer generations", "rollout.max_new_tokens: 4 -> 8")
    message = h.git(ws, "show", "-s", "--format=%B", sha)
    assert "Evo-Version: v1" in message and "Evo-Parent: v0" in message
    assert "Evo-Intervention: rollout.max_new_tokens: 4 -> 8" in message
    assert h.git(ws, "rev-parse", "evo/v1") == sha
    assert h.git(path, "status", "--porcelain") == ""
    # Resuming after a kill returns the same commit instead of stacking another.
    assert lin.commit_version("v1", "Longer generations", "x") == sha
    assert lin.changed_paths("v1") == ["analyzers/echo.py", "recipe.yaml"]
    assert "max_new_tokens: 8" in lin.file_at("v1", "recipe.yaml")
    assert "max_new_tokens: 4" in lin.file_at("v0", "recipe.yaml")
    with pytest.raises(VersionError, match="has no file 'nope.txt'"):
        lin.file_at("v1", "nope.txt")

    # Empty commits are allowed: every version owns a commit.
    lin.create_version("v2", ["v1"])
    sha2 = lin.commit_version("v2", "No change", None)
    assert h.git(ws, "rev-parse", f"{sha2}^") == sha and lin.changed_paths("v2") == []
    assert lin.versions() == ["v0", "v1", "v2"] and lin.next_version() == "v3"

    lin.remove_worktree("v1")
    assert not path.exists() and lin.commit_version("v1", "again", None) == sha


def test_events_append_idempotently_and_follow_the_commit(lin, ws, h):
    lin.create_version("v1", ["v0"])
    parent_head = h.git(ws, "rev-parse", "evo/v0")
    assert lin.append_event("v1", {"event": "skill_used", "skill": "raise-generation-length", "domain": "arithmetic",
                                   "id": "v1-skill"}) is True
    assert lin.append_event("v1", {"event": "skill_used", "skill": "other", "id": "v1-skill"}) is False
    sha = lin.commit_version("v1", "x", None)
    # The early event moved with the version's head; v0's note holds only v0's lines.
    assert "v1-skill" in h.git(ws, "notes", "--ref", "evo/lineage", "show", sha)
    assert "v1" not in h.git(ws, "notes", "--ref", "evo/lineage", "show", parent_head).replace('"v0"', "")
    lin.append_event("v1", {"event": "evaluated", "avg_at_k": 0.25, "k": 8, "n_tasks": 40})
    events = lin.events("v1")
    assert [e["event"] for e in events] == ["skill_used", "evaluated"]
    filled = events[-1]
    assert filled["version"] == "v1" and filled["time"].endswith("Z") and filled["id"]
    assert [e["skill"] for e in events if e["event"] == "skill_used"] == ["raise-generation-length"]


@pytest.mark.parametrize("event, fragment", [
    ({"event": "judged", "baseline": "v0", "outcome": "better", "headline": {"metric": "m", "value": 1.0}},
     "outcome: 'better' is invalid"),
    ({"event": "evaluated", "avg_at_k": 0.5, "k": 0, "n_tasks": 3}, "k: 0 is invalid"),
    ({"event": "created", "parents": ["v0"]}, "commit: required key is missing"),
    ({"event": "teleported"}, "event: 'teleported' is invalid"),
    ({"event": "kept", "reason": "x", "time": "yesterday"}, "time: 'yesterday' is invalid"),
])
def test_schema_violations_are_one_line_and_write_nothing(lin, ws, h, event, fragment):
    before = h.snapshot(ws)
    with pytest.raises(LineageError) as info:
        lin.append_event("v0", event)
    message = str(info.value)
    assert fragment in message and "\n" not in message and "v0" in message
    assert h.snapshot(ws) == before


def test_unknown_versions_are_named(lin):
    with pytest.raises(VersionError, match=r"unknown version 'v9' \(known: v0\)"):
        lin.record("v9")
    with pytest.raises(VersionError, match="unknown version 'v9'"):
        lin.create_version("v1", ["v9"])
    with pytest.raises(VersionError, match="not a version name"):
        lin.append_event("main", {"event": "kept", "reason": "x"})
    assert lin.versions() == ["v0"]


def test_a_bad_note_fails_reads_with_its_version_and_the_fix(lin, ws, h):
    sha = h.git(ws, "rev-parse", "evo/v0")
    note = h.git(ws, "notes", "--ref", "evo/lineage", "show", sha)
    broken = note + '\n{"event": "judged", "version": "v0", "time": "2025-01-01T00:00:00Z", "id": "j", ' \
                    '"baseline": "v0", "outcome": "great", "headline": {"metric": "m", "value": 1}}'
    h.git(ws, "notes", "--ref", "evo/lineage", "add", "-f", "-m", broken, sha)
    before = h.snapshot(ws)
    with pytest.raises(LineageError) as info:
        lin.read_all()
    message = str(info.value)
    assert "v0" in message and sha[:12] in message and "'great'" in message
    assert f"git notes --ref=evo/lineage edit {sha}" in message
    # Appending on top of a corrupt note refuses too, rather than burying the line.
    with pytest.raises(LineageError):
        lin.append_event("v0", {"event": "kept", "reason": "x"})
    h.git(ws, "notes", "--ref", "evo/lineage", "add", "-f", "-m", "not json at all", sha)
    with pytest.raises(LineageError, match="is not JSON"):
        lin.read_all()
    assert h.snapshot(ws)["refs"] != before["refs"]  # only our own manual edit changed the notes ref


def test_states_come_from_refs_and_events(lin, h):
    h.make_version(lin, "v1", ["v0"])
    lin.append_event("v1", {"event": "gated", "estimate": {"tokens": 1e6, "gpu_hours": 3.0}, "threshold": 1.0,
                            "status": "awaiting-approval"})
    assert lin.record("v1").state == "awaiting-approval"
    lin.append_event("v1", {"event": "approved", "reason": "worth it", "by": "ada"})
    assert lin.record("v1").state == "frontier"
    lin.append_event("v1", h.judged(0.4, 0.1))
    rec = lin.record("v1")
    assert rec.outcome == "improvement" and rec.headline["value"] == 0.4 and rec.created
    assert Lineage.promoted_head(lin.read_all()).name == "v0"
    assert [r.name for r in Lineage.frontier(lin.read_all())] == ["v1"]
    # v0 is judged against the untrained base model, named "base".
    lin.append_event("v0", h.judged(0.14, -0.04, outcome="insufficient", baseline="base"))
    assert lin.record("v0").outcome == "insufficient"


def test_notes_follow_an_amended_commit(lin, ws, h):
    path = lin.create_version("v1", ["v0"])
    sha = lin.commit_version("v1", "x", None)
    lin.append_event("v1", {"event": "kept", "reason": "x"})
    h.git(path, "commit", "-q", "--amend", "--allow-empty", "-m", "x amended\n\nEvo-Version: v1\nEvo-Parent: v0")
    new = h.git(ws, "rev-parse", "evo/v1")
    assert new != sha and "kept" in h.git(ws, "notes", "--ref", "evo/lineage", "show", new)
    assert [e["event"] for e in lin.events("v1")] == ["kept"]


def test_worktree_changes_reset_and_discard(lin, ws, h):
    path = lin.create_version("v1", ["v0"])
    (path / "recipe.yaml").write_text("half an edit\n")
    (path / "memory" / "new.md").write_text("x\n")
    (path / "AGENTS.md").unlink()
    (path / ".evo").mkdir()
    (path / ".evo" / "manifest.json").write_text("{}")  # ignored: the agent's own scratch
    assert lin.worktree_changes("v1") == ["AGENTS.md", "memory/new.md", "recipe.yaml"]
    lin.reset_worktree("v1")
    assert lin.worktree_changes("v1") == [] and (path / ".evo" / "manifest.json").exists()
    assert (path / "recipe.yaml").read_text() == lin.file_at("v0", "recipe.yaml")

    lin.append_event("v1", {"event": "skill_used", "skill": "s", "id": "v1-s"})
    lin.discard_version("v1")
    assert not path.exists() and h.git(ws, "branch", "--list", "evo/v1") == ""
    assert "evo/v1" not in h.git(ws, "config", "--local", "--list")
    assert "v1-s" not in h.git(ws, "notes", "--ref", "evo/lineage", "show", "evo/v0")
    assert lin.versions() == ["v0"] and lin.next_version() == "v1"
    assert [e["id"] for e in lin.events("v0")] == ["v0-created", "v0-promoted"]
    assert "refs/heads/evo/v1" not in h.git(ws, "for-each-ref", "--format=%(refname)")
    lin.discard_version("v1")  # already gone: nothing to do

    h.make_version(lin, "v1", ["v0"])
    with pytest.raises(VersionError, match="prune it instead"):
        lin.discard_version("v1")
    with pytest.raises(VersionError, match="recorded in lineage"):
        lin.discard_version("v0")


def test_reset_keeps_a_merge_in_progress(lin, h):
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    h.make_version(lin, "v2", ["v0"], edit=h.set_recipe_value("learning_rate: 0.0005", "learning_rate: 0.001"))
    path = lin.create_version("v3", ["v1", "v2"])
    (path / "scratch.txt").write_text("x")
    lin.reset_worktree("v3")
    assert not (path / "scratch.txt").exists()
    sha = lin.commit_version("v3", "merge", None)
    assert len(h.git(path, "rev-list", "--parents", "-n", "1", sha).split()) == 3


def test_dirty_paths_and_push_without_a_remote(lin, ws):
    assert lin.dirty_paths() == [] and lin.has_remote() is False
    (ws / "my notes.txt").write_text("x")
    assert lin.dirty_paths() == ["my notes.txt"]
    with pytest.raises(WorkspaceError, match="no git remote"):
        lin.push_version("v0")


def test_push_version_publishes_branch_and_notes(tmp_path, lin, ws, h):
    h.git(tmp_path, "init", "-q", "--bare", "--initial-branch=main", "remote.git")
    h.git(ws, "remote", "add", "origin", str(tmp_path / "remote.git"))
    h.make_version(lin, "v1", ["v0"])
    assert lin.has_remote()
    lin.push_version("v1")
    remote_refs = h.git(tmp_path / "remote.git", "for-each-ref", "--format=%(refname) %(objectname)")
    assert f"refs/heads/evo/v1 {h.git(ws, 'rev-parse', 'evo/v1')}" in remote_refs
    assert f"refs/notes/evo/lineage {h.git(ws, 'rev-parse', 'refs/notes/evo/lineage')}" in remote_refs
