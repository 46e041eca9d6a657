"""Version state transitions as git operations: promote, prune, revert, merge.

Each one either completes or leaves the repository as it was (an aborted merge
or revert is rolled back before the error is raised), and each can be re-run
after a kill: the git step is skipped when already done and the event carries
a deterministic id, so it is written once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import git

from evo.errors import VersionError, WorkspaceError
from evo.lineage import gitio
from evo.lineage.gitio import BRANCH_PREFIX, MAIN, PRUNED_PREFIX, TAG_PREFIX
from evo.vocabulary import event_id

if TYPE_CHECKING:
    from evo.lineage.store import Lineage

# What a promoted version dictates on main: the trained policy was produced by
# exactly these files, so main takes them verbatim. Everything else (memory/,
# evo.yaml, docs) merges normally, so main's own updates survive.
VERSION_OWNED = ("recipe.yaml", "analyzers", "skills", "trainer_prompts")


def _take_version_paths(g: git.Git, commit: str) -> None:
    """Make VERSION_OWNED paths in the index and checkout equal to `commit`'s."""
    theirs = set(g.ls_tree("-r", "--name-only", commit, "--", *VERSION_OWNED).splitlines())
    ours = set(g.ls_files("--", *VERSION_OWNED).splitlines())
    stale = sorted(ours - theirs)
    if stale:
        g.rm("-q", "-f", "--", *stale)
    present = [p for p in VERSION_OWNED if any(t == p or t.startswith(p + "/") for t in theirs)]
    if present:
        g.checkout(commit, "--", *present)


def _settle_conflicts_toward(g: git.Git, side: str) -> None:
    """Resolve conflicts -X could not (modify/delete, renames) toward `--ours`/`--theirs`."""
    for path in gitio.unmerged_paths(g):
        try:
            g.checkout(side, "--", path)
            g.add("--", path)
        except git.GitCommandError:
            g.rm("-q", "-f", "--", path)


def _done_on_main(g: git.Git, trailer: str, version: str, since: str | None = None) -> str | None:
    """The commit on main that already carries `trailer: version`: a transition killed before its record."""
    found = g.log("--first-parent", "-n", "1", "--format=%H", f"--grep=^{trailer}: {version}$",
                  f"{since}..{MAIN}" if since else MAIN)
    return found.strip() or None


def promote(lin: "Lineage", version: str, reason: str) -> str:
    lin.ensure_identity()
    rec = lin.record(version)
    tag = f"evo/promoted/{version}"
    if rec.state == "pruned":
        raise VersionError(f"{version} was pruned; pruned versions cannot be promoted (create a new version from it instead)")
    if rec.state == "reverted":
        raise VersionError(f"{version} was promoted and then reverted; git will not merge the same commits twice, "
                           f"so start a new version from it (e.g. `evo merge {version} <other>`)")
    if rec.promoted_tag:
        merge_commit = gitio.rev(lin.repo, f"{TAG_PREFIX}{version}")
        recorded = any(e["event"] == "promoted" and e.get("commit") == merge_commit for e in rec.events)
        if not recorded and lin.append_event(version, {"event": "promoted", "reason": reason, "commit": merge_commit,
                                                       "id": event_id(version, "promoted", merge_commit[:12])}):
            return merge_commit  # resumed after a kill between tag and event
        raise VersionError(f"{version} is already promoted (tag {tag})")
    from evo.recipe import parse_recipe  # here, not at import: reads should not load jsonschema

    # A recipe that does not load must never become main's.
    parse_recipe(lin.file_at(version, "recipe.yaml"), source=f"recipe.yaml of {version}")
    g = lin.require_clean_main(f"promote {version}")
    merge_commit = _done_on_main(g, gitio.TRAILER_PROMOTED, version) or _merge_into_main(g, version, rec.commit, reason)
    lin.repo.git.tag("-a", tag, "-m", f"Promote {version}: {reason.strip()}", merge_commit)
    lin.append_event(version, {"event": "promoted", "reason": reason, "commit": merge_commit,
                               "id": event_id(version, "promoted", merge_commit[:12])})
    return merge_commit


def _merge_into_main(g: git.Git, version: str, head: str, reason: str) -> str:
    """The promotion merge commit of `version` (at `head`) on main; rolled back on failure."""
    try:
        g.merge_base("--is-ancestor", head, MAIN)
        raise VersionError(f"{version} adds no commit beyond {MAIN}; commit its work before promoting it")
    except git.GitCommandError:
        pass  # not an ancestor: there is something to merge
    message = f"Promote {version}: {reason.strip()}\n\n{gitio.trailer_block([(gitio.TRAILER_PROMOTED, version)])}\n"
    try:
        try:
            g.merge("--no-ff", "--no-commit", "-X", "theirs", f"{BRANCH_PREFIX}{version}")
        except git.GitCommandError:
            if not gitio.unmerged_paths(g):
                raise
            _settle_conflicts_toward(g, "--theirs")
        _take_version_paths(g, head)
        g.commit("--no-verify", "--cleanup=whitespace", "-m", message)
    except git.GitCommandError as exc:
        try:
            g.merge("--abort")
        except git.GitCommandError:
            pass
        raise WorkspaceError(f"promoting {version} failed and was rolled back: {gitio.first_line(exc)}") from None
    return gitio.rev(g, "HEAD")


def prune(lin: "Lineage", version: str, reason: str) -> str:
    rec = lin.record(version)
    if rec.state == "promoted":
        what = "the baseline" if version == "v0" else "promoted"
        raise VersionError(f"{version} is {what} on {MAIN}; revert it first (`evo revert {version} --reason ...`)")
    head = rec.commit
    lin.repo.git.update_ref(f"{PRUNED_PREFIX}{version}", head)
    lin.remove_worktree(version)
    if gitio.ref_exists(lin.repo, f"{BRANCH_PREFIX}{version}"):
        lin.repo.git.branch("-D", f"evo/{version}")
    lin.append_event(version, {"event": "pruned", "reason": reason, "id": event_id(version, "pruned", head[:12])})
    return head


def revert(lin: "Lineage", version: str, reason: str) -> str:
    lin.ensure_identity()
    rec = lin.record(version)
    if rec.state == "reverted":
        raise VersionError(f"{version} is already reverted")
    if rec.state != "promoted":
        raise VersionError(f"{version} is {rec.state}, not promoted; only a promotion can be reverted")
    merge_commit = gitio.rev(lin.repo, f"{TAG_PREFIX}{version}")
    parents = lin.repo.git.rev_list("--parents", "-n", "1", merge_commit).split()[1:]
    if len(parents) != 2:
        raise VersionError(f"{version} has no promotion merge to revert (tag evo/promoted/{version} is "
                           f"{'the baseline' if version == 'v0' else 'not a merge'}); promote another version instead")
    g = lin.require_clean_main(f"revert {version}")
    try:
        g.merge_base("--is-ancestor", merge_commit, MAIN)
    except git.GitCommandError:
        raise VersionError(f"{version}'s promotion {merge_commit[:12]} is not on {MAIN}; nothing to revert") from None
    revert_commit = _done_on_main(g, gitio.TRAILER_REVERTED, version, since=merge_commit)
    if revert_commit is None:
        message = f"Revert promotion of {version}: {reason.strip()}\n\n{gitio.trailer_block([(gitio.TRAILER_REVERTED, version)])}\n"
        try:
            g.revert("-m", "1", "--no-commit", merge_commit)
            g.commit("--no-verify", "--allow-empty", "--cleanup=whitespace", "-m", message)
        except git.GitCommandError as exc:
            conflicted = gitio.unmerged_paths(g)
            try:
                g.revert("--abort")
            except git.GitCommandError:
                g.reset("--merge")
            if conflicted:
                raise WorkspaceError(f"reverting {version} conflicts with later commits on {MAIN} ({', '.join(conflicted)}); "
                                     "revert the later promotions first; nothing was changed") from None
            raise WorkspaceError(f"reverting {version} failed and was rolled back: {gitio.first_line(exc)}") from None
        revert_commit = gitio.rev(g, "HEAD")
    lin.append_event(version, {"event": "reverted", "reason": reason, "commit": revert_commit,
                               "id": event_id(version, "reverted", revert_commit[:12])})
    return revert_commit


def merge(lin: "Lineage", a: str, b: str, reason: str) -> str:
    records = lin.read_all()
    for name in (a, b):
        if name not in records:
            raise lin._unknown(name, list(records))
        if records[name].state == "pruned":
            raise VersionError(f"{name} was pruned; merge live versions only (see `evo log`)")
    if a == b:
        raise VersionError(f"cannot merge {a} with itself; name two different versions")
    # Resume a merge killed before its `created` event rather than starting another.
    pending = [r.name for r in records.values()
               if r.parents == [a, b] and r.last("created") is None and r.state == "frontier"]
    version = pending[0] if pending else lin.next_version()
    lin.create_version(version, [a, b])
    label = f"merge of {a} and {b}"
    commit = lin.commit_version(version, f"Merge {a} and {b}: {reason.strip()}", intervention=label)
    lin.append_event(version, {"event": "merged", "parents": [a, b], "reason": reason, "id": event_id(version, "merged")})
    lin.append_event(version, {"event": "created", "parents": [a, b], "branch": f"evo/{version}", "commit": commit,
                               "intervention": label, "agent": None, "id": event_id(version, "created")})
    return version
