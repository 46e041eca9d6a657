"""`evo fsck --repair`: the safe repairs of the problems `evo.lineage.fsck.check` finds.

Safe means: restoring what the lineage already records (a deleted branch,
pruned ref or promotion tag; the notes ref from its reflog), removing what
nothing refers to (an orphan worktree, a half-made version with no commit of
its own), or committing memory a killed step wrote on main. Everything runs
under the workspace lock.
"""

from __future__ import annotations

from pathlib import Path

from evo.lineage import fsck, gitio
from evo.lineage.fsck import Problem
from evo.lineage.gitio import NOTES_REF
from evo.lineage.store import Lineage


def repair(root: str | Path, settings: dict | None = None, *, hashes: str = "all") -> tuple[list[str], list[Problem]]:
    """Apply every safe repair under the workspace lock; returns (what was done, the problems left).

    Rounds of check-then-repair, because one repair can reveal the next (a
    restored notes ref makes the versions readable again).
    """
    from evo.lineage.lock import workspace_lock

    lin = Lineage.open(root)
    done: list[str] = []
    with workspace_lock(lin.root, "evo fsck --repair"):
        for _round in range(4):
            problems = fsck.check(lin.root, settings, hashes="none")
            todo = [p for p in problems if p.repairable]
            if not todo:
                break
            for problem in todo:
                done.append(_apply(lin, problem))
        return done, fsck.check(lin.root, settings, hashes=hashes)


def _apply(lin: Lineage, problem: Problem) -> str:
    action, *args = problem.repair
    g = lin.repo.git
    if action == "restore-notes":
        g.update_ref(NOTES_REF, args[0])
        return f"pointed {NOTES_REF} back at {args[0][:12]}"
    if action == "restore-ref":
        ref, commit = args
        if not gitio.ref_exists(lin.repo, ref):
            g.update_ref(ref, commit)
        return f"restored {ref} at {commit[:12]}"
    if action == "restore-tag":
        version, commit = args
        lin.ensure_identity()
        g.tag("-a", f"evo/promoted/{version}", "-m", f"Promote {version} (tag restored by evo fsck)", commit)
        return f"re-created tag evo/promoted/{version} at {commit[:12]}"
    if action == "finish-prune":
        (version,) = args
        lin.remove_worktree(version)
        g.branch("-D", f"evo/{version}")
        return f"deleted branch evo/{version} of pruned {version}"
    if action == "discard":
        (version,) = args
        lin.discard_version(version)
        return f"discarded half-made {version}"
    if action == "remove-worktree":
        (name,) = args
        lin.remove_worktree(name)
        return f"removed orphan worktree {gitio.WORKTREES / name}"
    if action == "prune-worktrees":
        g.worktree("prune")
        return "forgot worktrees whose folders are gone"
    if action == "commit-memory":
        sha = lin.commit_main("evo: record memory (recommitted by evo fsck --repair)", list(args))
        return f"committed {len(args)} memory path(s) on main" + (f" as {sha[:12]}" if sha else "")
    raise ValueError(f"unknown repair {action!r}")
