"""`Lineage`: a workspace's versions as git branches, with their lineage notes.

This is the only place EvoTrainer runs git. Version vN is the branch `evo/vN`,
worked on in the worktree `.evo/worktrees/vN`; its record is JSON lines in the
note on its head commit. The workspace root checkout always stays on `main`.
State transitions (promote, prune, revert, merge) live in
`evo.lineage.transitions`, version comparison in `evo.lineage.compare`, and
working-file operations (worktrees, the root checkout) in `evo.lineage.checkouts`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import git

from evo.errors import EvoError, VersionError, WorkspaceError
from evo.lineage import compare, gitio, notes, transitions
from evo.lineage.checkouts import CheckoutMixin
from evo.lineage.events import (
    EPOCH,
    VersionRecord,
    check_event,
    complete_event,
    derive_state,
    event_sort_key,
    version_number,
)
from evo.lineage.gitio import BRANCH_PREFIX, PRUNED_PREFIX, TAG_PREFIX

SETTINGS_FILE = "evo.yaml"  # evo.settings.SETTINGS_FILE; not imported so reads skip jsonschema


def find_workspace_root(start: str | Path) -> Path | None:
    """The workspace containing `start`, found the way git finds its top level; None outside one.

    Walks up from `start` to the nearest `.git`; a version worktree's `.git` file
    leads through its `commondir` to the workspace it belongs to. That checkout is
    the workspace when it holds evo.yaml. Pure file reads, no git process, so every
    command can call it.
    """
    path = Path(start).expanduser().absolute()
    for folder in (path, *path.parents):
        dot_git = folder / ".git"
        if dot_git.is_dir():
            top = folder
        elif dot_git.is_file():
            try:
                text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                return None
            if not text.startswith("gitdir:"):
                return None
            gitdir = Path(text[len("gitdir:"):].strip())
            gitdir = gitdir if gitdir.is_absolute() else folder / gitdir
            try:
                common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
            except OSError:
                common = gitdir.resolve()
            top = common.parent if common.name == ".git" else folder
        else:
            continue
        return top if (top / SETTINGS_FILE).is_file() else None
    return None


class Lineage(CheckoutMixin):
    """Versions, their git refs and their lineage events in one workspace."""

    def __init__(self, root: Path, repo: git.Repo):
        self.root = root
        self.repo = repo
        self._identity_checked = False

    # ----------------------------------------------------------- opening
    @classmethod
    def open(cls, root: str | Path) -> "Lineage":
        """Open the workspace at (or containing) `root`; a worktree opens its workspace."""
        path = Path(root).expanduser().absolute()
        if not path.is_dir():
            raise WorkspaceError(f"'{path}' does not exist; run `evo init {path}` to create a workspace there")
        try:
            repo = git.Repo(path, search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise WorkspaceError(
                f"'{path}' is not a git repository, so not an EvoTrainer workspace; run `evo init {path}` to create one"
            ) from None
        if repo.bare:
            raise WorkspaceError(f"'{path}' is a bare git repository; clone it and run evo in the clone")
        common = Path(repo.common_dir).resolve()
        top = common.parent if common.name == ".git" else Path(repo.working_tree_dir).resolve()
        if top != Path(repo.working_tree_dir).resolve():
            repo = git.Repo(top)  # opened from inside a version worktree
        if not (top / SETTINGS_FILE).is_file():
            where = "" if top == path.resolve() else f" (its git repository {top} has none)"
            raise WorkspaceError(
                f"'{path}' is not an EvoTrainer workspace (no {SETTINGS_FILE}){where}; run `evo init` there"
            )
        return cls(top, repo)

    # ----------------------------------------------------------- names and refs
    def _refs(self) -> dict[str, dict[str, str]]:
        """kind ('branch'|'pruned'|'tag') -> version -> commit id, one git process."""
        out: dict[str, dict[str, str]] = {"branch": {}, "pruned": {}, "tag": {}}
        for name, obj, peeled in gitio.for_each_ref(self.repo, BRANCH_PREFIX, PRUNED_PREFIX, TAG_PREFIX):
            for kind, prefix in (("branch", BRANCH_PREFIX), ("pruned", PRUNED_PREFIX), ("tag", TAG_PREFIX)):
                if name.startswith(prefix) and gitio.is_version_name(name[len(prefix):]):
                    out[kind][name[len(prefix):]] = peeled or obj
        return out

    def versions(self) -> list[str]:
        """Every version with a ref (live, pruned or promoted), numerically sorted."""
        refs = self._refs()
        names = set(refs["branch"]) | set(refs["pruned"]) | set(refs["tag"])
        return sorted(names, key=version_number)

    def next_version(self) -> str:
        """The first unused version name (pruned names are never reused)."""
        names = self.versions()
        return f"v{version_number(names[-1]) + 1}" if names else "v0"

    def _check_name(self, version: str) -> None:
        if not gitio.is_version_name(version):
            raise VersionError(f"{version!r} is not a version name; use v<N>, e.g. v3")

    def _unknown(self, version: str, known: list[str] | None = None) -> VersionError:
        """The error for a version with no ref to read it from, saying how to get it back where it can be."""
        refs = self._refs()
        if version not in refs["branch"] and version not in refs["pruned"]:
            if version in refs["tag"]:
                return VersionError(f"{version}'s branch evo/{version} is missing (deleted?) although it was promoted "
                                    f"(tag evo/promoted/{version}); restore it with `evo fsck --repair`")
            try:
                recorded = version in notes.read_all_events(self.repo, self.root)
            except EvoError:  # a broken note is reported by the commands that read it; here it means "unknown"
                recorded = False
            if recorded:
                return VersionError(f"{version} has lineage events but neither its branch evo/{version} nor "
                                    f"refs/evo/pruned/{version} exists; restore it with `evo fsck --repair`")
        known = self.versions() if known is None else known
        shown = ", ".join(known[-8:]) if known else "none"
        return VersionError(f"unknown version {version!r} (known: {shown}); see `evo log`")

    def ensure_identity(self) -> None:
        """Before the first git write of this instance: a usable commit identity (see gitio.ensure_identity)."""
        if not self._identity_checked:
            gitio.ensure_identity(self.repo)
            self._identity_checked = True

    def head(self, version: str) -> str:
        """The commit of `version`: its branch, else its pruned ref, else its promotion tag."""
        self._check_name(version)
        for ref in (f"{BRANCH_PREFIX}{version}", f"{PRUNED_PREFIX}{version}"):
            try:
                return gitio.rev(self.repo, ref)
            except git.GitCommandError:
                continue
        raise self._unknown(version)

    def _set_parents_config(self, version: str, parents: list[str]) -> None:
        with self.repo.config_writer() as cw:
            cw.set_value(f'branch "evo/{version}"', gitio.PARENTS_CONFIG_KEY, " ".join(parents))

    def _parents_from_config(self, version: str) -> list[str]:
        reader = self.repo.config_reader()
        section = f'branch "evo/{version}"'
        if reader.has_option(section, gitio.PARENTS_CONFIG_KEY):
            return str(reader.get_value(section, gitio.PARENTS_CONFIG_KEY)).split()
        return []

    def parents(self, version: str) -> list[str]:
        """Parents from the `created` event, else from the branch (a version not yet committed)."""
        rec = self.read_all().get(version)
        if rec is None:
            raise self._unknown(version)
        return rec.parents

    # ----------------------------------------------------------- create and commit
    def create_version(self, version: str, parents: list[str]) -> Path:
        """Branch `evo/<version>` at parents[0] with a worktree; re-running resumes.

        With two parents the worktree holds an uncommitted merge of both (conflicts
        resolved toward parents[0]); `commit_version` records it as a merge commit.
        """
        self._check_name(version)
        self.ensure_identity()
        if not 1 <= len(parents) <= 2:
            raise VersionError(f"{version}: a version has one or two parents, got {parents!r}")
        refs = self._refs()
        if version in refs["pruned"]:
            raise VersionError(f"{version} exists and was pruned; use a new name (next: {self.next_version()})")
        bases = []
        for parent in parents:
            self._check_name(parent)
            commit = refs["branch"].get(parent) or refs["pruned"].get(parent)
            if commit is None:
                raise self._unknown(parent, sorted(set(refs["branch"]) | set(refs["pruned"]), key=version_number))
            bases.append(commit)
        branch = f"evo/{version}"
        if version not in refs["branch"]:
            self.repo.git.branch(branch, bases[0])
            self._set_parents_config(version, parents)
        path = self.worktree_path(version)
        if path.resolve() not in self._registered_worktrees():
            self.repo.git.worktree("prune")
            if path.exists():  # left by a killed `worktree add`; it is ours, under .evo/
                shutil.rmtree(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.repo.git.worktree("add", "--quiet", str(path), branch)
        if len(parents) == 2:
            self._start_merge(version, path, bases)
        return path

    def _start_merge(self, version: str, path: Path, bases: list[str]) -> None:
        wt = git.Git(str(path))
        head = gitio.rev(wt, "HEAD")
        if head != bases[0]:
            return  # already committed (resume)
        try:
            wt.rev_parse("-q", "--verify", "MERGE_HEAD")
            return  # merge already in progress (resume)
        except git.GitCommandError:
            pass
        try:
            wt.merge("--no-ff", "--no-commit", "-X", "ours", bases[1])
        except git.GitCommandError:
            conflicted = gitio.unmerged_paths(wt)
            if not conflicted:
                raise
            for p in conflicted:  # modify/delete and rename conflicts -X cannot settle
                try:
                    wt.checkout("--ours", "--", p)
                    wt.add("--", p)
                except git.GitCommandError:
                    wt.rm("-q", "--", p)

    def commit_version(self, version: str, message: str, intervention: str | None = None) -> str:
        """Commit everything in the version's worktree with Evo-* trailers; re-running resumes.

        Always makes a commit (possibly empty) so every version has one of its own;
        returns the existing head when it already carries `Evo-Version: <version>`
        and nothing changed since.
        """
        self._check_name(version)
        self.ensure_identity()
        head = self.head(version)
        path = self.worktree_path(version)
        already = version in gitio.trailers(gitio.commit_message(self.repo, head), gitio.TRAILER_VERSION)
        if not path.is_dir():
            if already:
                return head
            raise VersionError(f"{version} has no worktree at {path}; create it with create_version first")
        wt = git.Git(str(path))
        wt.add("-A")
        merging = True
        try:
            wt.rev_parse("-q", "--verify", "MERGE_HEAD")
        except git.GitCommandError:
            merging = False
        if already and not merging and not gitio.dirty_paths(wt):
            return head
        parents = self._parents_from_config(version) or self.parents(version)
        pairs = [(gitio.TRAILER_VERSION, version)] + [(gitio.TRAILER_PARENT, p) for p in parents]
        if intervention:
            pairs.append((gitio.TRAILER_INTERVENTION, intervention))
        text = f"{message.strip()}\n\n{gitio.trailer_block(pairs)}\n"
        wt.commit("--allow-empty", "--no-verify", "--cleanup=whitespace", "-m", text)
        new = gitio.rev(wt, "HEAD")
        with notes.notes_lock(self.repo, f"commit {version}"):
            notes.move_version_lines(self.repo, version, head, new)
        return new

    # ----------------------------------------------------------- events
    def append_event(self, version: str, event: dict) -> bool:
        """Validate and append one event to `version`'s note; False if its id is already there."""
        self._check_name(version)
        self.ensure_identity()
        full = complete_event(version, event)
        check_event(full, source=f"lineage event {full.get('event')!r} for {version}",
                    fix="see evo/schemas/lineage_event.schema.json")
        head = self.head(version)
        with notes.notes_lock(self.repo, f"lineage note for {version}"):
            return notes.append_line(self.repo, head, full)

    def read_all(self) -> dict[str, VersionRecord]:
        """Every version's record, in bulk: a constant number of git processes."""
        refs = self._refs()
        events = notes.read_all_events(self.repo, self.root)
        names = sorted(set(refs["branch"]) | set(refs["pruned"]) | set(refs["tag"]), key=version_number)
        config = self.repo.config_reader()  # parsed in-process; no git spawned
        parents_of: dict[str, list[str]] = {}
        for name in names:
            evs = events.get(name, [])
            first = next((e for e in reversed(evs) if e["event"] in ("created", "merged")), None)
            if first is not None:
                parents_of[name] = list(first["parents"])
            else:
                section = f'branch "evo/{name}"'
                if config.has_option(section, gitio.PARENTS_CONFIG_KEY):
                    parents_of[name] = str(config.get_value(section, gitio.PARENTS_CONFIG_KEY)).split()
        # Versions recorded by neither events nor config (e.g. pruned before any
        # `created` event): their commit trailers say, read in one more batch.
        unknown = [n for n in names if n not in parents_of]
        commits = {n: refs["branch"].get(n) or refs["pruned"].get(n) or refs["tag"][n] for n in unknown}
        bodies = gitio.cat_file_batch(self.root, sorted(set(commits.values())))
        for name in unknown:
            parents_of[name] = gitio.trailers(bodies[commits[name]].decode("utf-8", "replace"), gitio.TRAILER_PARENT)
        records: dict[str, VersionRecord] = {}
        for name in names:
            evs = events.get(name, [])
            created = next((e for e in reversed(evs) if e["event"] == "created"), None)
            parents = parents_of[name]
            pruned = name in refs["pruned"] and name not in refs["branch"]
            if name in refs["branch"]:
                commit, ref = refs["branch"][name], f"{BRANCH_PREFIX}{name}"
            elif name in refs["pruned"]:
                commit, ref = refs["pruned"][name], f"{PRUNED_PREFIX}{name}"
            else:
                commit, ref = (created or {}).get("commit") or refs["tag"][name], f"{TAG_PREFIX}{name}"
            records[name] = VersionRecord(
                name=name, commit=commit, branch=ref, parents=parents, events=evs,
                promoted_tag=name in refs["tag"],
                state=derive_state(evs, pruned=pruned, promoted_tag=name in refs["tag"]),
            )
        return records

    def record(self, version: str) -> VersionRecord:
        self._check_name(version)
        records = self.read_all()
        if version not in records:
            raise self._unknown(version, list(records))
        return records[version]

    def events(self, version: str) -> list[dict]:
        return self.record(version).events

    @staticmethod
    def promoted_head(records: dict[str, VersionRecord]) -> VersionRecord | None:
        """The version main currently reflects: the latest promotion not reverted."""
        live = [r for r in records.values() if r.state == "promoted"]
        if not live:
            return None

        def promoted_at(r: VersionRecord):
            ev = r.last("promoted")
            return (event_sort_key(ev) if ev else EPOCH, r.number)

        return max(live, key=promoted_at)

    @staticmethod
    def frontier(records: dict[str, VersionRecord]) -> list[VersionRecord]:
        """Live candidates: frontier and awaiting-approval versions, oldest first."""
        return [r for r in records.values() if r.state in ("frontier", "awaiting-approval")]

    # ----------------------------------------------------------- transitions
    def promote(self, version: str, reason: str) -> str:
        """Merge `version` into main (--no-ff), tag `evo/promoted/<version>`; returns the merge commit."""
        return transitions.promote(self, version, reason)

    def prune(self, version: str, reason: str) -> str:
        """Move the branch to `refs/evo/pruned/<version>`, drop its worktree; returns its commit."""
        return transitions.prune(self, version, reason)

    def revert(self, version: str, reason: str) -> str:
        """Undo `version`'s promotion on main (`revert -m 1`); returns the revert commit."""
        return transitions.revert(self, version, reason)

    def merge(self, a: str, b: str, reason: str) -> str:
        """A new version merging `a` and `b`; returns its name."""
        return transitions.merge(self, a, b, reason)

    def diff(self, a: str, b: str) -> dict:
        """Recipe diff, harness diff stat and metric deltas between two versions."""
        return compare.diff(self, a, b)

