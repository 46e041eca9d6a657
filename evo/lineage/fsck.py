"""`evo fsck`: do a workspace's refs, notes, journal, worktrees and artifacts agree?

Each check yields `Problem`s, one per fault, each a line naming what is wrong
and the command that fixes it. `evo.lineage.repair.repair` applies the safe fixes: those that only
restore what the lineage already records (a deleted branch, pruned ref or
promotion tag; the notes ref from its reflog), drop what nothing refers to (an
orphan worktree, a half-made version with no commit of its own), or commit
what a killed step wrote but did not commit (memory/ and skill evidence).
Nothing that needs a judgement (lost artifacts, a user's commit on main) is
repaired; its line says what a person can do.

What is checked:
- notes: the lineage notes ref reads as notes, and every note line parses;
- refs: every version the lineage records has its branch (live) or
  `refs/evo/pruned/vN` (pruned), a promoted one its tag; no prune left half-done;
- versions: no branch without a commit of its own or a `created` event, other
  than the one an interrupted step (the journal) is making;
- worktrees: none under `.evo/worktrees/` for a version without a live branch,
  none registered whose folder is gone;
- artifacts: every file any event lists in `artifacts` ({name, uri, size,
  sha256}, relative to the event's `run` folder under the artifact root, else
  to the version's folder) is there with its size, and with its sha256 for the
  versions `hashes` selects;
- main: `recipe.yaml`, `analyzers/`, `skills/` and `trainer_prompts/` are the
  promoted head's, except for what evo's own commits on main changed since
  (skill evidence); memory a killed record left uncommitted.

`check` is read-only and runs a constant number of git processes (about a dozen),
plus reading every recorded artifact's size and hashing the selected ones.
The ref and note checks live here, the file checks (artifacts, main) in
`evo.lineage.fsck_content`, the repairs in `evo.lineage.repair`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from evo.errors import ConfigError, EvoError, LineageError
from evo.lineage import fsck_content, gitio, notes
from evo.lineage.fsck_content import sha256_of, version_key
from evo.lineage.gitio import BRANCH_PREFIX, NOTES_REF, PRUNED_PREFIX
from evo.lineage.store import Lineage

JOURNAL = Path(".evo") / "journal" / "current.json"  # evo.loop.journal's in-flight step
HASHES = ("none", "head", "all")

__all__ = ["Problem", "check", "require_consistent", "sha256_of", "HASHES", "JOURNAL"]


@dataclass(frozen=True)
class Problem:
    """One inconsistency: what is wrong, the command that fixes it, and the safe repair if there is one."""

    kind: str  # notes-ref, note-invalid, refs-missing, branch-missing, pruned-ref-missing, prune-unfinished,
    #            tag-missing, half-made, unrecorded, worktree-orphan, worktree-stale, journal, settings,
    #            artifact-missing, artifact-changed, main-edited, memory-uncommitted
    subject: str  # the version, path or ref it concerns
    message: str
    fix: str
    repair: tuple = ()  # (action, *arguments) that `repair` runs; empty when a person must act

    @property
    def repairable(self) -> bool:
        return bool(self.repair)

    @property
    def line(self) -> str:
        return f"{self.message}; {self.fix}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "subject": self.subject, "message": self.message, "fix": self.fix,
                "repairable": self.repairable}


def check(root: str | Path, settings: dict | None = None, *, hashes: str = "head") -> list[Problem]:
    """Every inconsistency in the workspace at `root`, in a stable order.

    `settings`: the loaded evo.yaml (read here when None). `hashes`: which
    recorded artifacts get their sha256 recomputed, beyond the size check all
    get: "none", "head" (the promoted head's, and the trained version its policy
    comes from: what the next step reads; the default) or "all".
    """
    if hashes not in HASHES:
        raise ValueError(f"hashes must be one of {HASHES}, got {hashes!r}")
    lin = Lineage.open(root)
    return _Checker(lin, settings, hashes).run()


def require_consistent(root: str | Path, settings: dict | None = None, *, hashes: str = "head",
                       ignore: tuple[str, ...] = ()) -> None:
    """Raise WorkspaceError naming the first problem and `evo fsck` when `check` finds any (kinds in `ignore` aside)."""
    from evo.errors import WorkspaceError

    problems = [p for p in check(root, settings, hashes=hashes) if p.kind not in ignore]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise WorkspaceError(f"the workspace is inconsistent: {problems[0].message}{more}; "
                             "run `evo fsck` to see every problem and `evo fsck --repair` for the safe repairs")


class _Checker:
    def __init__(self, lin: Lineage, settings: dict | None, hashes: str):
        self.lin, self.repo, self.root, self.hashes = lin, lin.repo, lin.root, hashes
        self.problems: list[Problem] = []
        self.settings = settings
        self._records: dict | None = None

    def add(self, kind: str, subject: str, message: str, fix: str, repair: tuple = ()) -> None:
        self.problems.append(Problem(kind, subject, message, fix, repair))

    @property
    def records(self) -> dict:
        """`Lineage.read_all()`, read once per check."""
        if self._records is None:
            self._records = self.lin.read_all()
        return self._records

    def run(self) -> list[Problem]:
        self._load_settings()
        self.in_flight = self._journal()
        self.refs = self.lin._refs()
        self.sources: dict[str, set[str]] = {}
        self.events = self._events()
        if self.events is not None:
            self._version_refs()
            self._half_made()
        self._worktrees()
        if self.events is not None:
            fsck_content.check_artifacts(self)
            fsck_content.check_main(self)
        return self.problems

    # ------------------------------------------------------------- settings and journal
    def _load_settings(self) -> None:
        if self.settings is not None:
            return
        from evo.settings import load_settings, normalize_settings

        try:
            self.settings = load_settings(self.root)
        except ConfigError as exc:
            self.add("settings", "evo.yaml", str(exc), "fix evo.yaml (artifacts were looked for at the default root)")
            self.settings = normalize_settings({"domain": "unknown", "model": "unknown"})

    def _journal(self) -> str | None:
        path = self.root / JOURNAL
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            version = data["version"]
            phases = list(data.get("phases_done") or [])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.add("journal", str(JOURNAL), f"{JOURNAL} is unreadable ({type(exc).__name__})",
                     f"remove it (`rm {JOURNAL}`) to abandon the interrupted step, then run `evo fsck` again")
            return None
        if not isinstance(version, str) or not gitio.is_version_name(version):
            self.add("journal", str(JOURNAL), f"{JOURNAL} names no version ({version!r})",
                     f"remove it (`rm {JOURNAL}`) to abandon the interrupted step")
            return None
        committed = any(p in phases for p in ("commit", "run", "evaluate", "judge", "decide", "record"))
        if committed and not gitio.ref_exists(self.repo, f"{BRANCH_PREFIX}{version}") \
                and not gitio.ref_exists(self.repo, f"{PRUNED_PREFIX}{version}"):
            self.add("journal", version, f"the interrupted step of {version} is past its commit but branch "
                     f"evo/{version} is gone", f"remove {JOURNAL} to abandon that step (`rm {JOURNAL}`)")
        return version

    # ------------------------------------------------------------- notes and refs
    def _events(self) -> dict[str, list[dict]] | None:
        errors: list[LineageError] = []
        try:
            events = notes.read_all_events(self.repo, self.root, errors=errors, sources=self.sources)
        except EvoError:  # `git notes list` failed: the notes ref is what is broken (described below)
            events = None
        if events is None:
            problem = gitio.notes_ref_problem(self.repo) or "cannot be listed by `git notes list`"
            good = gitio.good_notes_commit(self.repo, skip=gitio.rev_or_none(self.repo, NOTES_REF))
            fix = (f"`evo fsck --repair` points it back at {good[:12]}, its last readable value in the reflog" if good
                   else f"point it at a good notes commit: `git update-ref {NOTES_REF} <commit>` (a clone has one: "
                        f"`git fetch origin {NOTES_REF}:{NOTES_REF}`)")
            self.add("notes-ref", NOTES_REF, f"{NOTES_REF} {problem}, so no lineage can be read", fix,
                     ("restore-notes", good) if good else ())
            return None
        for exc in errors:
            message, _, fix = str(exc).partition("; ")
            self.add("note-invalid", NOTES_REF, message, fix or "repair the note with `git notes --ref=evo/lineage edit`")
        if not events and not errors and any(self.refs.values()):
            # A notes ref reset to an unrelated commit reads as "no notes": every check
            # below would then misread the versions, so stop here.
            current = gitio.rev_or_none(self.repo, NOTES_REF)
            good = gitio.good_notes_commit(self.repo, skip=current)
            fix = (f"`evo fsck --repair` points {NOTES_REF} back at {good[:12]}, the last value in its reflog that "
                   "holds notes" if good else f"fetch the notes from a clone: `git fetch origin {NOTES_REF}:{NOTES_REF}`")
            self.add("notes-ref", NOTES_REF, f"the workspace has {len(self.lin.versions())} version(s) but "
                     f"{NOTES_REF} holds no lineage events ({'it is missing' if current is None else 'reset?'})",
                     fix, ("restore-notes", good) if good else ())
            return None
        return events

    def _note_commit(self, version: str) -> str | None:
        """The commit a version's events sit on (its head by contract), preferring its `created` event's."""
        created = next((e for e in reversed(self.events.get(version, [])) if e["event"] == "created"), None)
        candidates = sorted(self.sources.get(version, ()))
        if created and created.get("commit") and gitio.is_commit(self.repo, created["commit"]):
            return created["commit"]
        return next((c for c in candidates if gitio.is_commit(self.repo, c)), None)

    def _version_refs(self) -> None:
        branch, pruned, tag = self.refs["branch"], self.refs["pruned"], self.refs["tag"]
        for version in sorted(self.events, key=version_key):
            if not gitio.is_version_name(version):
                continue
            evs = self.events[version]
            kinds = [e["event"] for e in evs]
            was_pruned = "pruned" in kinds
            commit = branch.get(version) or pruned.get(version) or self._note_commit(version)
            if version not in branch and version not in pruned:
                if version == self.in_flight and "created" not in kinds:
                    continue
                if version in tag and not was_pruned:
                    self._restore("branch-missing", version, f"{BRANCH_PREFIX}{version}", commit,
                                  f"{version} is promoted (tag evo/promoted/{version}) but its branch evo/{version} is missing")
                else:
                    ref = f"{PRUNED_PREFIX}{version}" if was_pruned else f"{BRANCH_PREFIX}{version}"
                    self._restore("refs-missing", version, ref, commit,
                                  f"{version} has lineage events but no branch evo/{version} and no {PRUNED_PREFIX}{version}")
            elif was_pruned and version not in pruned:
                self._restore("pruned-ref-missing", version, f"{PRUNED_PREFIX}{version}", branch[version],
                              f"{version} was pruned (its lineage says so) but {PRUNED_PREFIX}{version} is missing")
            elif version in pruned and version in branch and version != self.in_flight:
                if was_pruned and pruned[version] == branch[version]:
                    self.add("prune-unfinished", version, f"{version} was pruned but its branch evo/{version} is still there",
                             f"`evo fsck --repair` deletes the branch (the commit stays at {PRUNED_PREFIX}{version})",
                             ("finish-prune", version))
                elif not was_pruned:
                    self.add("prune-unfinished", version, f"a prune of {version} stopped half-way (both its branch and "
                             f"{PRUNED_PREFIX}{version} exist, no pruned event)", f"run `evo prune {version} --reason ...` again")
            promoted = next((e for e in reversed(evs) if e["event"] == "promoted"), None)
            if promoted is not None and version not in tag:
                target = promoted.get("commit")
                if target and gitio.is_commit(self.repo, target):
                    self.add("tag-missing", version, f"{version} is promoted (its lineage says so) but tag "
                             f"evo/promoted/{version} is missing", f"`evo fsck --repair` re-creates it at {target[:12]}",
                             ("restore-tag", version, target))
                else:
                    self.add("tag-missing", version, f"{version} is promoted but tag evo/promoted/{version} is missing "
                             "and its promotion commit is unknown", f"`git tag -a evo/promoted/{version} <merge commit>`")

    def _restore(self, kind: str, version: str, ref: str, commit: str | None, message: str) -> None:
        if commit:
            self.add(kind, version, message, f"`evo fsck --repair` restores {ref} at {commit[:12]}",
                     ("restore-ref", ref, commit))
        else:
            self.add(kind, version, message, f"restore it with `git update-ref {ref} <commit>` (its commit is unknown)")

    def _half_made(self) -> None:
        """Branches with no `created` event: scratch left by a killed step or dry run, or a commit never recorded."""
        unrecorded = [v for v, sha in self.refs["branch"].items()
                      if v != self.in_flight and not any(e["event"] == "created" for e in self.events.get(v, []))]
        bodies = gitio.cat_file_batch(self.root, sorted({self.refs["branch"][v] for v in unrecorded}))
        for version in sorted(unrecorded, key=version_key):
            message = bodies[self.refs["branch"][version]].decode("utf-8", "replace")
            if version in gitio.trailers(message, gitio.TRAILER_VERSION):
                self.add("unrecorded", version, f"{version} has a commit of its own but no `created` event (a step or "
                         "merge stopped before recording it)", f"`evo prune {version} --reason unrecorded` "
                         "(or rerun the `evo merge` that made it)")
            else:
                self.add("half-made", version, f"{version} is a half-made version (branch evo/{version} with no commit "
                         "of its own, left by an interrupted step or dry run)",
                         "`evo fsck --repair` discards it (branch, worktree and note lines)", ("discard", version))

    # ------------------------------------------------------------- worktrees
    def _worktrees(self) -> None:
        folder = (self.root / gitio.WORKTREES).resolve()
        listing = self.repo.git.worktree("list", "--porcelain")
        registered: dict[Path, bool] = {}  # path -> its folder is missing
        for block in listing.split("\n\n"):
            lines = block.strip().splitlines()
            if not lines or not lines[0].startswith("worktree "):
                continue
            path = Path(lines[0][len("worktree "):])
            registered[path.resolve()] = any(ln.startswith("prunable") for ln in lines) or not path.exists()
        stale = sorted(str(p) for p, gone in registered.items() if gone)
        if stale:
            self.add("worktree-stale", stale[0], f"{len(stale)} registered worktree(s) no longer exist ({', '.join(stale[:3])})",
                     "`evo fsck --repair` forgets them (`git worktree prune`)", ("prune-worktrees",))
        half_made = {p.subject for p in self.problems if p.kind == "half-made"}
        names = {p.name for p in registered if p.parent == folder and not registered[p]}
        if folder.is_dir():
            names |= {p.name for p in folder.iterdir() if p.is_dir()}
        for name in sorted(names):
            if name in self.refs["branch"] or name == self.in_flight or name in half_made:
                continue
            what = "a pruned version" if name in self.refs["pruned"] else "no live version"
            self.add("worktree-orphan", name, f"worktree {gitio.WORKTREES / name} belongs to {what} (no branch evo/{name})",
                     "`evo fsck --repair` removes it", ("remove-worktree", name))
