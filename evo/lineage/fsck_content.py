"""The content checks of `evo fsck`: recorded artifacts, and main against the promoted head.

Functions over `evo.lineage.fsck._Checker` (its lineage, refs, events and
settings); each adds its `Problem`s to it. Kept apart from the ref and note
checks because these read files: artifact sizes and hashes, trees and the
root checkout.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import git

from evo.lineage import gitio
from evo.lineage.gitio import MAIN
from evo.lineage.store import Lineage
from evo.lineage.transitions import VERSION_OWNED

if TYPE_CHECKING:
    from evo.lineage.fsck import _Checker

ORCHESTRATOR_SUBJECT = "evo: "  # subjects of the commits evo itself makes on main (`evo: record v3`)
REF_KINDS = ("refs-missing", "branch-missing", "pruned-ref-missing", "prune-unfinished", "tag-missing")
_EVIDENCE_BLOCK = re.compile(r"^evidence:.*\n(?:(?:[ \t]+|-).*\n|\n)*", re.M)  # as evo.agent.skills rewrites it


def check_artifacts(c: "_Checker") -> None:
    """Every file an event lists in `artifacts` is there, with its size, and its sha256 where hashed."""
    from evo.settings import artifact_root

    base_root = artifact_root(c.root, c.settings)
    hashed = hashed_versions(c)
    runs: dict[Path, tuple[str, dict[str, dict]]] = {}
    for version in sorted(c.events, key=version_key):
        for ev in c.events[version]:
            if not isinstance(ev.get("artifacts"), list):
                continue
            base = base_root / ev["run"] if isinstance(ev.get("run"), str) else base_root / version
            entry = runs.setdefault(base, (version, {}))
            for art in ev["artifacts"]:
                entry[1].setdefault(art["name"], art)
    if not runs:
        return
    shown_root = _shown(base_root, c.root)
    if not base_root.is_dir():  # e.g. `.evo/` deleted: one line, not one per run
        total = sum(len(arts) for _, arts in runs.values())
        owners = sorted({v for v, _ in runs.values()}, key=version_key)
        c.add("artifact-missing", shown_root, f"the artifact root {shown_root} is missing: all {total} artifacts "
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
            elif version in hashed and art.get("sha256") and sha256_of(path) != art["sha256"]:
                changed.append(f"{name}: sha256 differs from the recorded {art['sha256'][:12]}")
        if changed:
            shown = _shown(base, c.root)
            c.add("artifact-changed", version, f"{version}: {len(changed)} artifact(s) in {shown} differ from the "
                  f"lineage ({changed[0]})", "restore the recorded files from a backup; changed artifacts are not "
                  "trusted for judging")
    for version in sorted(missing, key=version_key):
        folders = sorted({_shown(base, c.root) for base, _ in missing[version]})
        where = folders[0] if len(folders) == 1 else f"{len(folders)} run folders: {', '.join(folders[:3])}" + \
            (" ..." if len(folders) > 3 else "")
        c.add("artifact-missing", version, f"{version}: {len(missing[version])} of {counts[version]} recorded "
              f"artifacts are missing from {where} (e.g. {missing[version][0][1]})",
              "restore them from a backup, or set artifacts.root in evo.yaml to where they are")


def hashed_versions(c: "_Checker") -> set[str]:
    """The versions whose artifacts get hashed: all, none, or the promoted head and the version its policy is from."""
    if c.hashes == "all":
        return set(c.events)
    if c.hashes == "none":
        return set()
    records = c.records
    head = Lineage.promoted_head(records)
    chain: set[str] = set()
    while head is not None and head.name not in chain:  # harness-only versions reuse an ancestor's policy
        chain.add(head.name)
        if head.last("trained") is not None or not head.parents:
            break
        head = records.get(head.parents[0])
    return chain


def check_main(c: "_Checker") -> None:
    """Main's version-owned files are the promoted head's but for evo's own commits; no memory left uncommitted."""
    try:
        on_main = c.repo.git.symbolic_ref("--short", "HEAD") == MAIN
    except git.GitCommandError:
        on_main = False
    if not on_main:
        return  # every evo write refuses with its own message until main is checked out
    uncommitted_memory(c)
    if any(p.kind in REF_KINDS for p in c.problems):
        return  # which version main should reflect is unknown until the refs are repaired
    edits = main_edits(c.repo, c.records, c.refs)
    if edits:
        head, (sha, subject) = edits["head"], edits["commits"][0]
        c.add("main-edited", head, f"main's {', '.join(edits['paths'][:3])} changed after "
              f"{head}'s promotion by commit {sha[:12]} ({subject!r}), which no version records",
              f"run `evo step`: it trains the edit as a version of its own (a human intervention, judged like any "
              f"other), or undo it with `git revert {sha[:12]}`")


def main_edits(repo: git.Repo, records: dict, refs: dict) -> dict | None:
    """Commits someone other than evo made on main to the version-owned files since the head's promotion.

    Returns {"head": name, "paths": [changed by those commits, still differing from the head],
    "commits": [(sha, subject), oldest first]}, or None when main's files are the head's
    but for evo's own commits (skill evidence, records).
    """
    head = Lineage.promoted_head(records)
    if head is None or head.name not in refs["tag"]:
        return None
    head_commit = refs["branch"].get(head.name) or head.commit
    if not head_commit or not gitio.is_commit(repo, head_commit):
        return None
    ours = _tree(repo, MAIN)
    theirs = _tree(repo, head_commit)
    differ = sorted(p for p in set(ours) | set(theirs) if ours.get(p) != theirs.get(p))
    if not differ:
        return None
    since = refs["tag"][head.name]
    log = repo.git.log("--first-parent", "--format=%H%x00%s%x00%b%x1e", f"{since}..{MAIN}", "--", *differ)
    foreign = []
    for entry in log.split("\x1e"):
        if not entry.strip():
            continue
        sha, subject, body = (entry.strip().split("\x00") + ["", ""])[:3]
        if subject.startswith(ORCHESTRATOR_SUBJECT) or gitio.TRAILER_PROMOTED in body or gitio.TRAILER_REVERTED in body:
            continue
        foreign.append((sha, subject))
    if not foreign:
        return None
    foreign.reverse()  # log lists newest first
    touched = set()
    for sha, _ in foreign:
        try:
            touched |= set(repo.git.diff("--name-only", f"{sha}^1", sha, "--", *differ).split())
        except git.GitCommandError:
            pass
    return {"head": head.name, "paths": sorted(touched & set(differ)) or differ, "commits": foreign}


def uncommitted_memory(c: "_Checker") -> None:
    if c.in_flight is not None:
        return  # the interrupted step commits its own record when it resumes
    dirty = c.lin.dirty_paths()
    paths = [p for p in dirty if p.startswith("memory/") or (p.startswith("skills/") and evidence_only(c, p))]
    if paths:
        c.add("memory-uncommitted", paths[0], f"main has uncommitted memory ({', '.join(paths[:3])}"
              f"{' ...' if len(paths) > 3 else ''}), e.g. left by a step killed while recording",
              "`evo fsck --repair` commits it on main", ("commit-memory", *paths))


def evidence_only(c: "_Checker", path: str) -> bool:
    """A skill file a record phase writes: SKILL.md evidence, or a copy of a built-in skill's file."""
    from evo.resources import resource_dir

    local = c.root / path
    if not local.is_file():
        return False
    try:
        committed = c.repo.git.show(f"HEAD:{path}", strip_newline_in_stdout=False)
    except git.GitCommandError:
        shipped = resource_dir("skills") / Path(path).relative_to("skills")
        committed = shipped.read_text(encoding="utf-8") if shipped.is_file() else None
    if committed is None:
        return False
    text = local.read_text(encoding="utf-8", errors="replace")
    if Path(path).name == "SKILL.md":
        return _EVIDENCE_BLOCK.sub("", text) == _EVIDENCE_BLOCK.sub("", committed)
    return text == committed


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks (checkpoints can be many GB)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _tree(repo: git.Repo, commit: str) -> dict[str, str]:
    """path -> blob id of the version-owned paths at `commit`."""
    out = repo.git.ls_tree("-r", commit, "--", *VERSION_OWNED)
    rows = (line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    return {path: meta.split()[2] for meta, path in rows}


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def version_key(name: str) -> int:
    """Numeric order of version names (anything else first)."""
    return int(name[1:]) if gitio.is_version_name(name) else -1
