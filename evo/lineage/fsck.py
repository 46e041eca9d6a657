"""`evo fsck`: do a workspace's refs, notes, journal, worktrees and artifacts agree?

Each check yields `Problem`s, one per fault, each a line naming what is wrong
and the command that fixes it. `repair` applies the safe fixes: those that only
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

`check` is read-only and runs a constant number of git processes (about ten),
plus reading every recorded artifact's size and hashing the selected ones.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import git

from evo.errors import ConfigError, LineageError
from evo.lineage import gitio, notes
from evo.lineage.gitio import BRANCH_PREFIX, MAIN, NOTES_REF, PRUNED_PREFIX, TAG_PREFIX
from evo.lineage.store import Lineage
from evo.lineage.transitions import VERSION_OWNED

JOURNAL = Path(".evo") / "journal" / "current.json"  # evo.loop.journal's in-flight step
ORCHESTRATOR_SUBJECT = "evo: "  # subjects of the commits evo itself makes on main (`evo: record v3`)
HASHES = ("none", "head", "all")
_REF_KINDS = ("refs-missing", "branch-missing", "pruned-ref-missing", "prune-unfinished", "tag-missing")
_EVIDENCE_BLOCK = re.compile(r"^evidence:.*\n(?:(?:[ \t]+|-).*\n|\n)*", re.M)  # as evo.agent.skills rewrites it


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

    def add(self, kind: str, subject: str, message: str, fix: str, repair: tuple = ()) -> None:
        self.problems.append(Problem(kind, subject, message, fix, repair))

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
            self._artifacts()
            self._main()
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
        problem = gitio.notes_ref_problem(self.repo)
        if problem is not None:
            good = good_notes_commit(self.repo, skip=_rev(self.repo, NOTES_REF))
            fix = (f"`evo fsck --repair` points it back at {good[:12]}, its last readable value in the reflog" if good
                   else f"point it at a good notes commit: `git update-ref {NOTES_REF} <commit>` (a clone has one: "
                        f"`git fetch origin {NOTES_REF}:{NOTES_REF}`)")
            self.add("notes-ref", NOTES_REF, f"{NOTES_REF} {problem}, so no lineage can be read", fix,
                     ("restore-notes", good) if good else ())
            return None
        errors: list[LineageError] = []
        events = notes.read_all_events(self.repo, self.root, errors=errors, sources=self.sources)
        for exc in errors:
            message, _, fix = str(exc).partition("; ")
            self.add("note-invalid", NOTES_REF, message, fix or "repair the note with `git notes --ref=evo/lineage edit`")
        if not events and not errors and any(self.refs.values()):
            # A notes ref reset to an unrelated commit reads as "no notes": every check
            # below would then misread the versions, so stop here.
            current = _rev(self.repo, NOTES_REF)
            good = good_notes_commit(self.repo, skip=current)
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
        if created and created.get("commit") and _is_commit(self.repo, created["commit"]):
            return created["commit"]
        return next((c for c in candidates if _is_commit(self.repo, c)), None)

    def _version_refs(self) -> None:
        branch, pruned, tag = self.refs["branch"], self.refs["pruned"], self.refs["tag"]
        for version in sorted(self.events, key=_number):
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
                if target and _is_commit(self.repo, target):
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
        for version in sorted(unrecorded, key=_number):
            message = bodies[self.refs["branch"][version]].decode("utf-8", "replace")
            if version in gitio.trailers(message, gitio.TRAILER_VERSION):
                self.add("unrecorded", version, f"{version} has a commit of its own but no `created` event (a step or "
                         "merge stopped before recording it)", f"`evo prune {version} --reason unrecorded` "
                         "(or rerun the `evo merge` that made it)")
            else:
                self.add("half-made", version, f"{version} is a half-made version (branch evo/{version} with no commit "
                         "of its own, left by an interrupted step or dry run)",
                         f"`evo fsck --repair` discards it (branch, worktree and note lines)", ("discard", version))

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

    # ------------------------------------------------------------- artifacts
    def _artifacts(self) -> None:
        from evo.settings import artifact_root

        base_root = artifact_root(self.root, self.settings)
        hashed = self._hashed_versions()
        runs: dict[Path, tuple[str, dict[str, dict]]] = {}
        for version in sorted(self.events, key=_number):
            for ev in self.events[version]:
                if not isinstance(ev.get("artifacts"), list):
                    continue
                base = base_root / ev["run"] if isinstance(ev.get("run"), str) else base_root / version
                entry = runs.setdefault(base, (version, {}))
                for art in ev["artifacts"]:
                    entry[1].setdefault(art["name"], art)
        if not runs:
            return
        shown_root = _shown(base_root, self.root)
        if not base_root.is_dir():  # e.g. `.evo/` deleted: one line, not one per run
            total = sum(len(arts) for _, arts in runs.values())
            owners = sorted({v for v, _ in runs.values()}, key=_number)
            self.add("artifact-missing", shown_root, f"the artifact root {shown_root} is missing: all {total} artifacts "
                     f"the lineage records for {', '.join(owners)} are gone",
                     f"restore {shown_root} from a backup, or set artifacts.root in evo.yaml to where it is")
            return
        missing: dict[str, list[tuple[Path, str]]] = {}  # version -> (run folder, artifact name)
        counts: dict[str, int] = {}
        for base, (version, arts) in runs.items():
            counts[version] = counts.get(version, 0) + len(arts)
            changed = []
            for name, art in sorted(arts.items()):
                path = base / name
                if not path.is_file():
                    missing.setdefault(version, []).append((base, name))
                    continue
                size = path.stat().st_size
                if art.get("size") is not None and size != art["size"]:
                    changed.append(f"{name}: {size:,} bytes, recorded {art['size']:,}")
                elif version in hashed and art.get("sha256") and _sha256(path) != art["sha256"]:
                    changed.append(f"{name}: sha256 differs from the recorded {art['sha256'][:12]}")
            if changed:
                shown = _shown(base, self.root)
                self.add("artifact-changed", version, f"{version}: {len(changed)} artifact(s) in {shown} differ from the "
                         f"lineage ({changed[0]})", "restore the recorded files from a backup; changed artifacts are not "
                         "trusted for judging")
        for version in sorted(missing, key=_number):
            folders = sorted({_shown(base, self.root) for base, _ in missing[version]})
            where = folders[0] if len(folders) == 1 else f"{len(folders)} run folders: {', '.join(folders[:3])}" + \
                (" ..." if len(folders) > 3 else "")
            self.add("artifact-missing", version, f"{version}: {len(missing[version])} of {counts[version]} recorded "
                     f"artifacts are missing from {where} (e.g. {missing[version][0][1]})",
                     f"restore them from a backup, or set artifacts.root in evo.yaml to where they are")

    def _hashed_versions(self) -> set[str]:
        if self.hashes == "all":
            return set(self.events)
        if self.hashes == "none":
            return set()
        records = self.lin.read_all()
        head = Lineage.promoted_head(records)
        chain: set[str] = set()
        while head is not None and head.name not in chain:  # harness-only versions reuse an ancestor's policy
            chain.add(head.name)
            if head.last("trained") is not None or not head.parents:
                break
            head = records.get(head.parents[0])
        return chain

    # ------------------------------------------------------------- main
    def _main(self) -> None:
        try:
            on_main = self.repo.git.symbolic_ref("--short", "HEAD") == MAIN
        except git.GitCommandError:
            on_main = False
        if not on_main:
            return  # every evo write refuses with its own message until main is checked out
        self._uncommitted_memory()
        if any(p.kind in _REF_KINDS for p in self.problems):
            return  # which version main should reflect is unknown until the refs are repaired
        records = self.lin.read_all()
        head = Lineage.promoted_head(records)
        if head is None or head.name not in self.refs["tag"]:
            return
        head_commit = self.refs["branch"].get(head.name) or head.commit
        if not head_commit or not _is_commit(self.repo, head_commit):
            return
        ours = _tree(self.repo, MAIN)
        theirs = _tree(self.repo, head_commit)
        differ = sorted(p for p in set(ours) | set(theirs) if ours.get(p) != theirs.get(p))
        if not differ:
            return
        since = self.refs["tag"][head.name]
        log = self.repo.git.log("--first-parent", "--format=%H%x00%s%x00%b%x1e", f"{since}..{MAIN}", "--", *differ)
        foreign = []
        for entry in log.split("\x1e"):
            if not entry.strip():
                continue
            sha, subject, body = (entry.strip().split("\x00") + ["", ""])[:3]
            if subject.startswith(ORCHESTRATOR_SUBJECT) or gitio.TRAILER_PROMOTED in body or gitio.TRAILER_REVERTED in body:
                continue
            foreign.append((sha, subject))
        if foreign:
            sha, subject = foreign[-1]  # the oldest: log lists newest first
            try:
                touched = self.repo.git.diff("--name-only", f"{sha}^1", sha, "--", *differ).split()
            except git.GitCommandError:
                touched = []
            self.add("main-edited", head.name, f"main's {', '.join(touched[:3]) or ', '.join(differ[:3])} changed after "
                     f"{head.name}'s promotion by commit {sha[:12]} ({subject!r}), which no version records",
                     f"propose the change as a version (the next `evo step` trains from {head.name}'s files), "
                     f"or undo it with `git revert {sha[:12]}`")

    def _uncommitted_memory(self) -> None:
        if self.in_flight is not None:
            return  # the interrupted step commits its own record when it resumes
        dirty = self.lin.dirty_paths()
        paths = [p for p in dirty if p.startswith("memory/") or (p.startswith("skills/") and self._evidence_only(p))]
        if paths:
            self.add("memory-uncommitted", paths[0], f"main has uncommitted memory ({', '.join(paths[:3])}"
                     f"{' ...' if len(paths) > 3 else ''}), e.g. left by a step killed while recording",
                     "`evo fsck --repair` commits it on main", ("commit-memory", *paths))

    def _evidence_only(self, path: str) -> bool:
        """A skill file a record phase writes: SKILL.md evidence, or a copy of a built-in skill's file."""
        from evo.resources import resource_dir

        local = self.root / path
        if not local.is_file():
            return False
        try:
            committed = self.repo.git.show(f"HEAD:{path}", strip_newline_in_stdout=False)
        except git.GitCommandError:
            shipped = resource_dir("skills") / Path(path).relative_to("skills")
            committed = shipped.read_text(encoding="utf-8") if shipped.is_file() else None
        if committed is None:
            return False
        text = local.read_text(encoding="utf-8", errors="replace")
        if Path(path).name == "SKILL.md":
            return _EVIDENCE_BLOCK.sub("", text) == _EVIDENCE_BLOCK.sub("", committed)
        return text == committed


# ------------------------------------------------------------------ repair
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
            problems = check(lin.root, settings, hashes="none")
            todo = [p for p in problems if p.repairable]
            if not todo:
                break
            for problem in todo:
                done.append(_apply(lin, problem))
        return done, check(lin.root, settings, hashes=hashes)


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


# ------------------------------------------------------------------ helpers
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
            if sha != skip and re.fullmatch(r"[0-9a-f]{40}", sha) and sha.strip("0") and _holds_notes(repo, sha):
                return sha
    return None


def _holds_notes(repo: git.Repo, sha: str) -> bool:
    """A commit whose tree names objects the way a notes tree does (hex paths, possibly fanned out)."""
    if not _is_commit(repo, sha):
        return False
    try:
        names = repo.git.ls_tree("-r", "--name-only", sha).split()
    except git.GitCommandError:
        return False
    return bool(names) and all(re.fullmatch(r"[0-9a-f]{40}", n.replace("/", "")) for n in names)


def _rev(repo: git.Repo, ref: str) -> str | None:
    try:
        return repo.git.rev_parse("-q", "--verify", ref)
    except git.GitCommandError:
        return None


def _is_commit(repo: git.Repo, sha: str) -> bool:
    try:
        return repo.git.cat_file("-t", sha) == "commit"
    except git.GitCommandError:
        return False


def _tree(repo: git.Repo, commit: str) -> dict[str, str]:
    """path -> blob id of the version-owned paths at `commit`."""
    out = repo.git.ls_tree("-r", commit, "--", *VERSION_OWNED)
    rows = (line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    return {path: meta.split()[2] for meta, path in rows}


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _number(name: str) -> int:
    return int(name[1:]) if gitio.is_version_name(name) else -1
