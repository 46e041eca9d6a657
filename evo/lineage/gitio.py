"""Thin helpers over GitPython and git plumbing, shared by the lineage modules.

Names of the refs EvoTrainer uses live here, so every module agrees on them.
Reads that must stay constant in process count (`read_all`) go through
`for_each_ref`, `notes_list` and `cat_file_batch` (one process each, whatever
the number of versions).
"""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

import git
from gitdb.base import IStream

from evo.errors import EvoError, LineageError, WorkspaceError

MAIN = "main"
NOTES_REF = "refs/notes/evo/lineage"
BRANCH_PREFIX = "refs/heads/evo/"
PRUNED_PREFIX = "refs/evo/pruned/"
TAG_PREFIX = "refs/tags/evo/promoted/"
WORKTREES = Path(".evo") / "worktrees"
PARENTS_CONFIG_KEY = "evoparents"  # branch.evo/vN.evoparents: parents of a version not yet committed

TRAILER_VERSION = "Evo-Version"
TRAILER_PARENT = "Evo-Parent"
TRAILER_INTERVENTION = "Evo-Intervention"
TRAILER_PROMOTED = "Evo-Promoted"
TRAILER_REVERTED = "Evo-Reverted"

IDENTITY = ("EvoTrainer", "evo@localhost")  # the repository-local identity set where git has none

_VERSION_RE = re.compile(r"^v[0-9]+$")


def is_version_name(name: str) -> bool:
    return bool(_VERSION_RE.match(name))


def git_executable() -> str:
    return git.Git.GIT_PYTHON_GIT_EXECUTABLE or "git"


def for_each_ref(repo: git.Repo, *prefixes: str) -> list[tuple[str, str, str]]:
    """(refname, object id, peeled commit id or "") under `prefixes`, one git process."""
    out = repo.git.for_each_ref("--format=%(refname)%00%(objectname)%00%(*objectname)", *prefixes)
    rows = []
    for line in out.splitlines():
        name, obj, peeled = line.split("\0")
        rows.append((name, obj, peeled))
    return rows


def notes_list(repo: git.Repo) -> list[tuple[str, str]]:
    """(note blob id, annotated commit id) for every lineage note, one git process.

    No notes ref yet is an empty lineage; a notes ref git cannot read (pointing
    at a blob, a tree, a missing object) is a LineageError, never an empty lineage.
    """
    try:
        out = repo.git.notes("--ref", NOTES_REF, "list")
    except git.GitCommandError as exc:
        raise notes_failure(repo, exc) from None
    return [tuple(line.split()) for line in out.splitlines() if line.strip()]  # type: ignore[misc]


def notes_ref_problem(repo: git.Repo) -> str | None:
    """Why the lineage notes ref cannot be read ("points at a blob 1a2b..."), or None when it can (or is absent)."""
    try:
        sha = repo.git.rev_parse("-q", "--verify", NOTES_REF)
    except git.GitCommandError:
        return None  # no lineage notes yet
    try:
        kind = repo.git.cat_file("-t", sha)
    except git.GitCommandError:
        return f"points at {sha[:12]}, an object missing from the repository"
    if kind != "commit":
        return f"points at a {kind} ({sha[:12]}), not a notes commit"
    try:
        repo.git.notes("--ref", NOTES_REF, "list")
    except git.GitCommandError as exc:
        return f"points at commit {sha[:12]} whose notes git cannot read ({first_line(exc)})"
    return None


def notes_failure(repo: git.Repo, exc: git.GitCommandError) -> EvoError:
    """The one-line error for a failed `git notes` command."""
    problem = notes_ref_problem(repo)
    if problem is not None:
        return LineageError(f"{NOTES_REF} {problem}, so the lineage cannot be read; "
                            "run `evo fsck` to see what is wrong and `evo fsck --repair` to restore it from its reflog")
    return WorkspaceError(f"git notes failed: {first_line(exc)}; run `evo fsck` in {repo.working_tree_dir}")


def first_line(exc: git.GitCommandError) -> str:
    """The first meaningful line of a git command's error output."""
    text = (exc.stderr or exc.stdout or str(exc)).strip().strip("'").strip()
    for line in text.splitlines():
        line = line.strip().removeprefix("stderr:").strip().strip("'").strip()
        if line:
            return line
    return f"git exited with {exc.status}"


def ensure_identity(repo: git.Repo) -> None:
    """Give the repository a local identity where git has none, so commits, tags and notes work.

    A clone does not carry the workspace's repository-local identity, and without
    one every commit fails with git's multi-line "Please tell me who you are". The
    same rule as `evo init`: set `EvoTrainer <evo@localhost>` locally, only for the
    missing keys, never in the user's global config.
    """
    try:
        repo.git.var("GIT_AUTHOR_IDENT")
        repo.git.var("GIT_COMMITTER_IDENT")
        return
    except git.GitCommandError:
        pass
    for key, value in zip(("user.name", "user.email"), IDENTITY):
        try:
            repo.git.config("--get", key)
        except git.GitCommandError:
            repo.git.config("--local", key, value)
    try:
        repo.git.var("GIT_COMMITTER_IDENT")
    except git.GitCommandError as exc:
        raise WorkspaceError(f"git has no usable identity in {repo.working_tree_dir} ({first_line(exc)}); "
                             "set one with `git config user.name NAME` and `git config user.email EMAIL` there") from None


def cat_file_batch(root: Path, object_ids: list[str]) -> dict[str, bytes]:
    """Contents of many objects through ONE `git cat-file --batch` process."""
    if not object_ids:
        return {}
    request = ("\n".join(object_ids) + "\n").encode()
    proc = subprocess.run(
        [git_executable(), "cat-file", "--batch"], cwd=root, input=request, capture_output=True, check=False
    )
    if proc.returncode != 0:
        raise WorkspaceError(f"{root}: `git cat-file --batch` failed ({proc.stderr.decode(errors='replace').strip()}); run `git fsck` there")
    data = proc.stdout
    out: dict[str, bytes] = {}
    pos = 0
    for oid in object_ids:
        nl = data.index(b"\n", pos)
        header = data[pos:nl].decode()
        parts = header.split()
        if len(parts) < 3:  # "<oid> missing"
            raise WorkspaceError(f"{root}: git object {oid} is missing ({header}); run `git fsck` there")
        size = int(parts[2])
        out[oid] = data[nl + 1 : nl + 1 + size]
        pos = nl + 1 + size + 1  # content is followed by a newline
    return out


def store_blob(repo: git.Repo, data: bytes) -> str:
    """Write a blob into the object database without spawning git; return its id."""
    istream = repo.odb.store(IStream(b"blob", len(data), io.BytesIO(data)))
    return istream.hexsha.decode() if isinstance(istream.hexsha, bytes) else istream.hexsha


def ref_exists(repo: git.Repo, ref: str) -> bool:
    try:
        repo.git.rev_parse("--verify", "-q", ref + "^{commit}")
        return True
    except git.GitCommandError:
        return False


def rev(repo_or_git, ref: str) -> str:
    g = repo_or_git.git if isinstance(repo_or_git, git.Repo) else repo_or_git
    return g.rev_parse("--verify", ref + "^{commit}")


def commit_message(repo: git.Repo, sha: str) -> str:
    return repo.git.show("-s", "--format=%B", sha)


def trailers(message: str, key: str) -> list[str]:
    """Values of `key:` trailer lines in a commit message."""
    return re.findall(rf"^{re.escape(key)}:[ \t]*(.+?)[ \t]*$", message, flags=re.MULTILINE)


def trailer_block(pairs: list[tuple[str, str]]) -> str:
    # Trailers must be single-line; a multi-line intervention summary is folded.
    return "\n".join(f"{k}: {' '.join(str(v).split())}" for k, v in pairs)


def dirty_paths(g: git.Git) -> list[str]:
    """Changed, staged and untracked (not ignored) paths of a checkout, sorted."""
    out = g.status("--porcelain", "-z", "--untracked-files=all", strip_newline_in_stdout=False)
    entries = out.split("\0")
    paths: set[str] = set()
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if len(entry) < 4:
            continue
        paths.add(entry[3:])
        if entry[0] in "RC":  # a rename/copy is followed by its source path
            paths.add(entries[i])
            i += 1
    return sorted(paths)


def unmerged_paths(g: git.Git) -> list[str]:
    out = g.diff("--name-only", "--diff-filter=U")
    return sorted(set(out.splitlines()))


def rev_or_none(repo: git.Repo, ref: str) -> str | None:
    """The object `ref` names, None when it does not exist."""
    try:
        return repo.git.rev_parse("-q", "--verify", ref)
    except git.GitCommandError:
        return None


def is_commit(repo: git.Repo, sha: str) -> bool:
    try:
        return repo.git.cat_file("-t", sha) == "commit"
    except git.GitCommandError:
        return False


def good_notes_commit(repo: git.Repo, *, skip: str | None = None) -> str | None:
    """The newest value of the notes ref, from its reflog file, that is a commit holding
    notes (`skip`: the current, bad value). The file is read directly: git's own reflog
    reader refuses while the ref points at a non-commit."""
    log = Path(repo.common_dir) / "logs" / NOTES_REF
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        parts = line.split()
        for sha in parts[1:2] + parts[0:1]:  # the value it took, else the one it had
            if sha != skip and re.fullmatch(r"[0-9a-f]{40}", sha) and sha.strip("0") and holds_notes(repo, sha):
                return sha
    return None


def holds_notes(repo: git.Repo, sha: str) -> bool:
    """A commit whose tree names objects the way a notes tree does (hex paths, possibly fanned out)."""
    if not is_commit(repo, sha):
        return False
    try:
        names = repo.git.ls_tree("-r", "--name-only", sha).split()
    except git.GitCommandError:
        return False
    return bool(names) and all(re.fullmatch(r"[0-9a-f]{40}", n.replace("/", "")) for n in names)
