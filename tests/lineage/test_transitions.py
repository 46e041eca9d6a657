"""Promote, prune, revert and merge as git operations, and their refusals."""

from __future__ import annotations

import pytest

from evo.errors import ConfigError, VersionError, WorkspaceError
from evo.lineage import Lineage


def test_promote_merges_no_ff_tags_and_main_takes_the_version_recipe(lin, ws, h):
    sha = h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    main_before = h.git(ws, "rev-parse", "main")
    merge = lin.promote("v1", "Avg@k up")
    assert h.git(ws, "rev-list", "--parents", "-n", "1", merge).split()[1:] == [main_before, sha]  # --no-ff
    assert h.git(ws, "rev-parse", "evo/promoted/v1^{commit}") == merge
    assert h.git(ws, "cat-file", "-t", "evo/promoted/v1") == "tag"
    assert "max_new_tokens: 8" in (ws / "recipe.yaml").read_text()
    assert h.git(ws, "status", "--porcelain") == ""
    rec = lin.record("v1")
    assert rec.state == "promoted" and rec.last("promoted")["reason"] == "Avg@k up"
    assert Lineage.promoted_head(lin.read_all()).name == "v1"
    with pytest.raises(VersionError, match="already promoted"):
        lin.promote("v1", "again")


def test_promoting_a_sibling_makes_main_match_it_exactly(lin, ws, h):
    """v1 and v2 both branch from v0; promoting v2 after v1 must not keep v1's recipe change."""
    # Far-apart lines: a plain merge would combine them cleanly, which is what must not happen.
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("  k: 8", "  k: 4"))
    h.make_version(lin, "v2", ["v0"], edit=h.set_recipe_value("temperature: 1.0", "temperature: 0.7"))
    lin.promote("v1", "first")
    (ws / "memory" / "lineage.md").write_text((ws / "memory" / "lineage.md").read_text() + "- v1 promoted\n")
    assert lin.commit_main("memory: v1", ["memory"]) is not None
    lin.promote("v2", "second")
    assert "  k: 8" in (ws / "recipe.yaml").read_text()
    assert (ws / "recipe.yaml").read_text() == lin.file_at("v2", "recipe.yaml")
    assert "- v1 promoted" in (ws / "memory" / "lineage.md").read_text()  # main's own memory survives


def test_revert_restores_mains_recipe(lin, ws, h):
    original = (ws / "recipe.yaml").read_text()
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    lin.promote("v1", "up")
    revert = lin.revert("v1", "regressed on hard stratum")
    assert (ws / "recipe.yaml").read_text() == original
    assert "Evo-Reverted: v1" in h.git(ws, "show", "-s", "--format=%B", revert)
    assert h.git(ws, "rev-parse", "main") == revert
    rec = lin.record("v1")
    assert rec.state == "reverted" and rec.last("reverted")["reason"] == "regressed on hard stratum"
    assert Lineage.promoted_head(lin.read_all()).name == "v0"
    with pytest.raises(VersionError, match="already reverted"):
        lin.revert("v1", "again")
    with pytest.raises(VersionError, match="reverted"):
        lin.promote("v1", "again")
    with pytest.raises(VersionError, match="baseline"):
        lin.revert("v0", "no")


def test_prune_keeps_commits_and_notes_readable(lin, ws, h):
    sha = h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 2"))
    lin.append_event("v1", h.judged(0.1, -0.2, outcome="regression"))
    path = lin.worktree_path("v1")
    assert lin.prune("v1", "regression") == sha
    assert not path.exists() and "v1" not in h.git(ws, "worktree", "list")
    assert h.git(ws, "branch", "--list", "evo/v1") == ""
    assert h.git(ws, "rev-parse", "refs/evo/pruned/v1") == sha
    h.git(ws, "gc", "-q", "--prune=now")
    assert h.git(ws, "cat-file", "-t", sha) == "commit"  # still reachable
    rec = Lineage.open(ws).record("v1")
    assert rec.state == "pruned" and rec.commit == sha and rec.outcome == "regression"
    assert [e["event"] for e in rec.events] == ["created", "judged", "pruned"]
    assert "max_new_tokens: 2" in lin.file_at("v1", "recipe.yaml")
    assert lin.next_version() == "v2"  # pruned names are not reused
    with pytest.raises(VersionError, match="pruned"):
        lin.promote("v1", "x")
    with pytest.raises(VersionError, match="pruned"):
        lin.create_version("v1", ["v0"])
    with pytest.raises(VersionError, match="revert it first"):
        lin.prune("v0", "no")


def test_merge_creates_a_version_with_two_parents(lin, ws, h):
    a = h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    b = h.make_version(lin, "v2", ["v0"], edit=h.set_recipe_value("learning_rate: 0.0005", "learning_rate: 0.001"))
    version = lin.merge("v1", "v2", "combine both")
    assert version == "v3"
    head = h.git(ws, "rev-parse", "evo/v3")
    assert h.git(ws, "rev-list", "--parents", "-n", "1", head).split()[1:] == [a, b]
    recipe = lin.file_at("v3", "recipe.yaml")
    assert "max_new_tokens: 8" in recipe and "learning_rate: 0.001" in recipe
    rec = lin.record("v3")
    assert rec.parents == ["v1", "v2"] and rec.state == "frontier"
    assert [e["event"] for e in rec.events] == ["merged", "created"]
    msg = h.git(ws, "show", "-s", "--format=%B", head)
    assert "Evo-Parent: v1" in msg and "Evo-Parent: v2" in msg
    diff = lin.diff("v1", "v3")
    assert [c["key"] for c in diff["recipe"]["changes"]] == ["grpo.learning_rate"]


def test_conflicting_merge_prefers_the_first_parent(lin, h):
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    h.make_version(lin, "v2", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 16"))
    lin.merge("v1", "v2", "both changed the same line")
    assert "max_new_tokens: 8" in lin.file_at("v3", "recipe.yaml")


def test_dirty_main_blocks_promote_and_revert_and_changes_nothing(lin, ws, h):
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    (ws / "recipe.yaml").write_text((ws / "recipe.yaml").read_text() + "# local edit\n")
    (ws / "scratch.txt").write_text("x")
    before = h.snapshot(ws)
    with pytest.raises(WorkspaceError) as info:
        lin.promote("v1", "x")
    message = str(info.value)
    assert "uncommitted changes" in message and "recipe.yaml" in message and "scratch.txt" in message
    assert "\n" not in message
    assert h.snapshot(ws) == before


def test_promote_refuses_a_version_whose_recipe_does_not_load(lin, ws, h):
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("num_generations: 8", "num_generations: 1"))
    before = h.snapshot(ws)
    with pytest.raises(ConfigError) as info:
        lin.promote("v1", "x")
    message = str(info.value)
    assert "recipe.yaml of v1" in message and "rollout.num_generations" in message and "1" in message
    assert "set it to 2 or more" in message
    assert h.snapshot(ws) == before


def test_promote_on_a_branch_other_than_main_is_refused(lin, ws, h):
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    h.git(ws, "checkout", "-q", "-b", "side")
    with pytest.raises(WorkspaceError, match="on 'side', not 'main'"):
        lin.promote("v1", "x")


def test_commit_main_commits_only_its_paths(lin, ws, h):
    (ws / "memory" / "search_notes.md").write_text("new note\n")
    (ws / "scratch.txt").write_text("not mine")
    before = h.git(ws, "rev-parse", "HEAD")
    sha = lin.commit_main("memory: notes", ["memory"])
    assert h.git(ws, "rev-parse", f"{sha}^") == before
    assert h.git(ws, "show", "--name-only", "--format=", sha) == "memory/search_notes.md"
    assert "scratch.txt" in h.git(ws, "status", "--porcelain")
    assert lin.commit_main("memory: nothing", ["memory"]) is None
    (ws / "memory" / "recurring_cases.md").unlink()
    assert lin.commit_main("memory: drop", ["memory/recurring_cases.md"]) is not None
    assert "memory/recurring_cases.md" not in h.git(ws, "ls-files")


def test_reverting_under_a_later_promotion_is_refused_and_changes_nothing(lin, ws, h):
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    lin.promote("v1", "up")
    h.make_version(lin, "v2", ["v1"], edit=h.set_recipe_value("max_new_tokens: 8", "max_new_tokens: 16"))
    lin.promote("v2", "up again")
    before = h.snapshot(ws)
    with pytest.raises(WorkspaceError) as info:
        lin.revert("v1", "x")
    assert "conflicts with later commits on main (recipe.yaml)" in str(info.value)
    assert h.snapshot(ws) == before
    lin.revert("v2", "first the later one")
    assert "max_new_tokens: 8" in (ws / "recipe.yaml").read_text()


def test_promote_and_revert_resume_after_a_kill_before_their_record(lin, ws, h):
    """A kill between the git commit and the tag / event: re-running finishes the same transition."""
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    h.make_version(lin, "v10", ["v1"], edit=h.set_recipe_value("temperature: 1.0", "temperature: 0.7"))
    merge = lin.promote("v1", "up")
    later = lin.promote("v10", "up again")  # its 'Evo-Promoted: v10' trailer must not pass for v1's
    h.git(ws, "tag", "-d", "evo/promoted/v1")  # as if killed between the merge commit and the tag
    assert lin.promote("v1", "up") == merge
    assert h.git(ws, "rev-parse", "evo/promoted/v1^{commit}") == merge
    assert h.git(ws, "rev-parse", "main") == later  # no second merge
    assert [e["event"] for e in lin.events("v1")] == ["created", "promoted"]

    revert = lin.revert("v10", "down")
    note = h.git(ws, "notes", "--ref", "evo/lineage", "show", "evo/v10")
    kept = "\n".join(line for line in note.splitlines() if '"reverted"' not in line)
    h.git(ws, "notes", "--ref", "evo/lineage", "add", "-f", "-m", kept, "evo/v10")  # killed before the event
    assert lin.record("v10").state == "promoted"
    assert lin.revert("v10", "down") == revert
    assert h.git(ws, "rev-parse", "main") == revert  # no second revert commit
    assert lin.record("v10").state == "reverted"
