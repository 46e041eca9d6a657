"""The workspace's checkouts: the root on `main` and one worktree per candidate.

A mixin of `Lineage` (it uses `self.repo`, `self.root`, `self.head`,
`self.parents`): files of a version, uncommitted work in a worktree, and the
root checkout's commits and pushes. Kept apart from `store` because these are
about working files, while `store` is about refs and notes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import git

from evo.errors import VersionError, WorkspaceError
from evo.lineage import gitio, notes
from evo.lineage.gitio import BRANCH_PREFIX, MAIN, NOTES_REF, PRUNED_PREFIX, TAG_PREFIX


class CheckoutMixin:
    root: Path
    repo: git.Repo

    # ----------------------------------------------------------- version worktrees
    def worktree_path(self, version: str) -> Path:
        return self.root / gitio.WORKTREES / version

    def _registered_worktrees(self) -> set[Path]:
        out = self.repo.git.worktree("list", "--porcelain")
        return {Path(line[len("worktree "):]).resolve() for line in out.splitlines() if line.startswith("worktree ")}

    def remove_worktree(self, version: str) -> None:
        """Remove `version`'s worktree (uncommitted work in it is discarded)."""
        path = self.worktree_path(version)
        if path.resolve() in self._registered_worktrees():
            self.repo.git.worktree("remove", "--force", str(path))
        elif path.exists():
            shutil.rmtree(path)
        self.repo.git.worktree("prune")

    def worktree_changes(self, version: str) -> list[str]:
        """Uncommitted paths in `version`'s worktree (modified, added, deleted, untracked)."""
        path = self.worktree_path(version)
        if not path.is_dir():
            raise VersionError(f"{version} has no worktree at {path}; create it with create_version first")
        return gitio.dirty_paths(git.Git(str(path)))

    def reset_worktree(self, version: str) -> None:
        """Throw away uncommitted edits in `version`'s worktree (e.g. a killed agent's half edit).

        Ignored files (the worktree's `.evo/`) stay. A two-parent version gets its
        merge started again, since a hard reset drops the merge in progress.
        """
        path = self.worktree_path(version)
        if not path.is_dir():
            raise VersionError(f"{version} has no worktree at {path}; create it with create_version first")
        wt = git.Git(str(path))
        wt.reset("-q", "--hard", "HEAD")
        wt.clean("-q", "-f", "-d")
        parents = self._parents_from_config(version)
        if len(parents) == 2:
            self._start_merge(version, path, [self.head(p) for p in parents])

    def discard_version(self, version: str) -> None:
        """Forget a candidate that never got a commit: worktree, branch and its note lines.

        For a dry run or a step that found nothing to do. A version with a commit
        of its own is lineage, not scratch: prune it instead.
        """
        self._check_name(version)
        self.ensure_identity()
        branch_ref = f"{BRANCH_PREFIX}{version}"
        for ref in (f"{PRUNED_PREFIX}{version}", f"{TAG_PREFIX}{version}"):
            if gitio.ref_exists(self.repo, ref):
                raise VersionError(f"{version} is recorded in lineage ({ref}); it cannot be discarded")
        if gitio.ref_exists(self.repo, branch_ref):
            head = gitio.rev(self.repo, branch_ref)
            if version in gitio.trailers(gitio.commit_message(self.repo, head), gitio.TRAILER_VERSION):
                raise VersionError(f"{version} has a commit of its own ({head[:12]}); prune it instead "
                                   f"(`evo prune {version} --reason ...`)")
            with notes.notes_lock(self.repo, f"discard {version}"):
                notes.remove_version_lines(self.repo, version, head)
        self.remove_worktree(version)
        if gitio.ref_exists(self.repo, branch_ref):
            self.repo.git.branch("-D", f"evo/{version}")  # also drops its branch config

    # ----------------------------------------------------------- files of versions
    def file_at(self, version: str, path: str) -> str:
        """Text of `path` in `version`'s head commit."""
        head = self.head(version)
        try:
            return self.repo.git.show(f"{head}:{path}", strip_newline_in_stdout=False)
        except git.GitCommandError:
            raise VersionError(f"{version} has no file {path!r} (commit {head[:12]})") from None

    def changed_paths(self, version: str) -> list[str]:
        """Paths `version` changes against its first parent, uncommitted work included."""
        parents = self._parents_from_config(version) or self.parents(version)
        if not parents:
            return []
        base = self.head(parents[0])
        path = self.worktree_path(version)
        if path.is_dir():
            wt = git.Git(str(path))
            tracked = wt.diff("--name-only", base).splitlines()
            untracked = wt.ls_files("--others", "--exclude-standard").splitlines()
            return sorted(set(tracked) | set(untracked))
        return sorted(self.repo.git.diff("--name-only", base, self.head(version)).splitlines())

    # ----------------------------------------------------------- the root checkout (main)
    def _main_git(self, action: str) -> git.Git:
        """The root checkout's git, after checking it is on main."""
        g = self.repo.git
        try:
            branch = g.symbolic_ref("--short", "HEAD")
        except git.GitCommandError:
            branch = "(detached HEAD)"
        if branch != MAIN:
            raise WorkspaceError(f"{self.root}: the workspace checkout is on {branch!r}, not {MAIN!r}; "
                                 f"run `git checkout {MAIN}` there, then {action} again")
        return g

    def dirty_paths(self) -> list[str]:
        """Uncommitted paths of the root checkout (ignored files such as `.evo/` excluded)."""
        return gitio.dirty_paths(self.repo.git)

    def checkout_state(self) -> dict:
        """What an agent must not change outside its worktree: every ref (notes included) and main's tree.

        `refs`: refname -> object id; `dirty`: uncommitted paths of the root checkout.
        """
        refs = {name: obj for name, obj, _ in gitio.for_each_ref(self.repo)}
        try:
            refs["HEAD"] = gitio.rev(self.repo.git, "HEAD")
        except git.GitCommandError:
            refs["HEAD"] = ""
        return {"refs": refs, "dirty": gitio.dirty_paths(self.repo.git)}

    def main_edits(self, records: dict | None = None) -> dict | None:
        """A person's commits on main to the version-owned files since the head's promotion (see fsck_content)."""
        from evo.lineage.fsck_content import main_edits

        return main_edits(self.repo, records if records is not None else self.read_all(), self._refs())

    def main_file(self, path: str) -> str | None:
        """Text of `path` in main's HEAD (None when main has no such file)."""
        try:
            return self.repo.git.show(f"{MAIN}:{path}", strip_newline_in_stdout=False)
        except git.GitCommandError:
            return None

    def restore_main_paths(self, paths: list[str]) -> None:
        """Put `paths` of the root checkout back as main's HEAD has them (untracked ones removed)."""
        g = self.repo.git
        tracked = set(g.ls_files("--", *paths).splitlines()) if paths else set()
        if tracked:
            g.checkout("HEAD", "--", *sorted(tracked))
        for rel in set(paths) - tracked:
            target = self.root / rel
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)

    def require_clean_main(self, action: str) -> git.Git:
        g = self._main_git(action)
        dirty = gitio.dirty_paths(g)
        if dirty:
            shown = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
            raise WorkspaceError(f"{self.root}: main has uncommitted changes ({shown}); commit or remove them, then {action} again")
        return g

    def commit_main(self, message: str, paths: list[str]) -> str | None:
        """Commit `paths` (relative to the root) on main; None when nothing changed."""
        if not paths:
            return None
        self.ensure_identity()
        g = self._main_git("commit")
        g.add("-A", "--", *paths)
        try:
            g.diff("--cached", "--quiet", "--", *paths)
            return None
        except git.GitCommandError:
            pass
        g.commit("--no-verify", "--cleanup=whitespace", "-m", message.strip(), "--", *paths)
        return gitio.rev(g, "HEAD")

    # ----------------------------------------------------------- remotes
    def has_remote(self) -> bool:
        return bool(self.repo.remotes)

    def push_version(self, version: str, remote: str | None = None) -> None:
        """Publish `version`'s branch and the lineage notes (for a pull request)."""
        if remote is None:
            names = [r.name for r in self.repo.remotes]
            if not names:
                raise WorkspaceError(f"{self.root} has no git remote; add one with `git remote add origin URL`")
            remote = "origin" if "origin" in names else names[0]
        self.head(version)  # unknown versions fail here, before any network
        try:
            self.repo.git.push(remote, f"{BRANCH_PREFIX}{version}:{BRANCH_PREFIX}{version}", f"{NOTES_REF}:{NOTES_REF}")
        except git.GitCommandError as exc:
            detail = next((ln.strip() for ln in str(exc.stderr).splitlines() if "rejected" in ln or "error" in ln),
                          f"git exited with {exc.status}")
            raise WorkspaceError(
                f"pushing {version} to {remote!r} failed ({detail.strip(chr(39))}); if the notes were rejected, run "
                f"`git fetch {remote} {NOTES_REF}:refs/notes/remotes/{remote}/evo/lineage && "
                f"git notes --ref=evo/lineage merge refs/notes/remotes/{remote}/evo/lineage` and push again"
            ) from None
