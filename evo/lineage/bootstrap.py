"""The git side of `evo init`: prepare the repository, configure it, commit v0.

Configuration written to the repository (never the user's global config):
- notes follow rewritten commits (`notes.rewriteRef`, amend and rebase);
- notes merge with `cat_sort_uniq`, so two machines' lineage lines combine;
- each remote the repository has at init pushes main, version branches,
  promotion tags, pruned refs and the lineage notes, and fetches the notes and
  pruned refs (non-forced, so a diverged local note is never overwritten; merge
  it with `git notes merge`);
- a local identity (`EvoTrainer <evo@localhost>`) only when none is set.
"""

from __future__ import annotations

from pathlib import Path

import git

from evo.errors import WorkspaceError
from evo.lineage.gitio import MAIN, NOTES_REF, TRAILER_INTERVENTION, TRAILER_VERSION, ensure_identity, trailer_block

NOTES_NAME = NOTES_REF[len("refs/notes/"):]
PUSH_REFSPECS = (
    f"refs/heads/{MAIN}:refs/heads/{MAIN}",
    "refs/heads/evo/*:refs/heads/evo/*",
    "refs/tags/evo/*:refs/tags/evo/*",
    "refs/notes/evo/*:refs/notes/evo/*",
    "refs/evo/*:refs/evo/*",
)
FETCH_REFSPECS = ("refs/notes/evo/*:refs/notes/evo/*", "refs/evo/*:refs/evo/*")


def _has_commits(repo: git.Repo) -> bool:
    try:
        repo.git.rev_parse("--verify", "-q", "HEAD")
        return True
    except git.GitCommandError:
        return False


def prepare_repository(root: Path, *, force: bool) -> git.Repo:
    """A git repository at `root` checked out on main, ready for the baseline files.

    Missing folder: created. Empty folder or empty repository (no commits, no
    files): adopted. Anything else needs `force`. Checks run before any write.
    """
    if root.exists():
        entries = sorted(p.name for p in root.iterdir() if p.name != ".git")
        has_git = (root / ".git").exists()
        repo = None
        if has_git:
            try:
                repo = git.Repo(root)
            except git.InvalidGitRepositoryError:
                raise WorkspaceError(f"'{root}/.git' is not a valid git repository; remove it or repair it") from None
        occupied = bool(entries) or (repo is not None and _has_commits(repo))
        if occupied and not force:
            what = f"{len(entries)} entries, e.g. {entries[0]!r}" if entries else "a git history"
            raise WorkspaceError(
                f"'{root}' is not empty ({what}); pass --force to make it a workspace "
                "(files named like the template's are overwritten) or choose an empty folder"
            )
    else:
        repo = None
    if repo is None:
        root.mkdir(parents=True, exist_ok=True)
        repo = git.Repo.init(root, initial_branch=MAIN)
    if not _has_commits(repo):
        repo.git.symbolic_ref("HEAD", f"refs/heads/{MAIN}")
    else:
        current = repo.git.symbolic_ref("--short", "-q", "HEAD") if repo.head.is_detached is False else ""
        if current != MAIN:
            if any(h.name == MAIN for h in repo.heads):
                raise WorkspaceError(f"'{root}' is on {current or 'a detached HEAD'!r}; run `git checkout {MAIN}` there first")
            repo.git.checkout("-b", MAIN)
    return repo


def configure_repository(repo: git.Repo) -> None:
    """Notes settings, remote refspecs and (if missing) a local identity."""
    with repo.config_writer() as cw:
        cw.set_value("notes", "rewriteRef", NOTES_REF)
        cw.set_value('notes "rewrite"', "amend", "true")
        cw.set_value('notes "rewrite"', "rebase", "true")
        cw.set_value(f'notes "{NOTES_NAME}"', "mergeStrategy", "cat_sort_uniq")
    for remote in repo.remotes:
        _add_refspecs(repo, f"remote.{remote.name}.push", PUSH_REFSPECS)
        _add_refspecs(repo, f"remote.{remote.name}.fetch", FETCH_REFSPECS)
    ensure_identity(repo)


def _add_refspecs(repo: git.Repo, key: str, specs: tuple[str, ...]) -> None:
    try:
        present = set(repo.git.config("--get-all", key).splitlines())
    except git.GitCommandError:
        present = set()
    for spec in specs:
        if spec not in present:
            repo.git.config("--add", key, spec)


def bootstrap_repository(root: Path, *, domain: str, agent: str) -> str:
    """Commit the baseline on main as v0 (branch, promotion tag, events); returns its commit."""
    from evo.lineage.store import Lineage

    repo = git.Repo(root)
    configure_repository(repo)
    repo.git.add("-A")
    message = (f"Baseline v0: the built-in {domain} recipe (evo init)\n\n"
               + trailer_block([(TRAILER_VERSION, "v0"), (TRAILER_INTERVENTION, "baseline")]) + "\n")
    repo.git.commit("--allow-empty", "--no-verify", "--cleanup=whitespace", "-m", message)
    commit = repo.git.rev_parse("HEAD")
    repo.git.branch("evo/v0", commit)
    repo.git.tag("-a", "evo/promoted/v0", "-m", "Baseline v0 (evo init)", commit)
    lin = Lineage.open(root)
    lin.append_event("v0", {"event": "created", "parents": [], "branch": "evo/v0", "commit": commit,
                            "intervention": None, "agent": agent, "id": "v0-created"})
    lin.append_event("v0", {"event": "promoted", "reason": "baseline (evo init)", "commit": commit, "id": "v0-promoted"})
    return commit
