"""Lineage notes: JSON lines on commits under `refs/notes/evo/lineage`.

Writes rewrite a whole note (read, append, `git notes add -f`), so two writers
racing on one note would silently drop a line; every write therefore runs under
a flock in the git common dir, shared by all worktrees of the repository.
Reads are bulk: one `git notes list` and one `git cat-file --batch`.
"""

from __future__ import annotations

import json
from pathlib import Path

import git

from evo.errors import LineageError
from evo.lineage.events import check_event, event_sort_key
from evo.lineage.gitio import NOTES_REF, cat_file_batch, notes_failure, notes_list, store_blob
from evo.lineage.lock import file_lock

NOTES_LOCK = "evo-notes.lock"
LOCK_WAIT_S = 120.0  # appends are milliseconds; waiting this long means a stuck writer


def notes_lock(repo: git.Repo, purpose: str):
    return file_lock(Path(repo.common_dir) / NOTES_LOCK, purpose, wait_s=LOCK_WAIT_S)


def repair_hint(commit: str) -> str:
    return f"repair the note with `git notes --ref={NOTES_REF[len('refs/notes/'):]} edit {commit}`"


def parse_note(text: str, commit: str) -> list[dict]:
    """Parse and validate every line of the note on `commit`."""
    numbered = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    try:  # one parse per note; the per-line parse below only runs to locate an error
        parsed = json.loads("[" + ",".join(line for _, line in numbered) + "]")
        if len(parsed) != len(numbered):
            raise ValueError("a line holds more than one value")
    except ValueError:
        parsed = None
    events = []
    for index, (number, line) in enumerate(numbered):
        if parsed is not None:
            event = parsed[index]
        else:
            try:
                event = json.loads(line)
            except ValueError as exc:
                raise LineageError(
                    f"lineage note on commit {commit[:12]} line {number} is not JSON ({exc.msg}); {repair_hint(commit)}"
                ) from None
        who = event.get("version") if isinstance(event, dict) and isinstance(event.get("version"), str) else "?"
        check_event(event, source=f"lineage note of {who} on commit {commit[:12]} line {number}", fix=repair_hint(commit))
        events.append(event)
    return events


def read_note(repo: git.Repo, commit: str) -> str:
    """The note text on `commit`, "" when there is none."""
    try:
        return repo.git.notes("--ref", NOTES_REF, "show", commit, strip_newline_in_stdout=False)
    except git.GitCommandError as exc:
        if "no note found" in str(exc.stderr):
            return ""
        raise notes_failure(repo, exc) from None


def write_note(repo: git.Repo, commit: str, text: str) -> None:
    """Replace the note on `commit` (verbatim; `-C` skips git's message cleanup)."""
    if not text.strip():
        try:
            repo.git.notes("--ref", NOTES_REF, "remove", "--ignore-missing", commit)
        except git.GitCommandError:
            pass
        return
    blob = store_blob(repo, text.encode("utf-8"))
    try:
        repo.git.notes("--ref", NOTES_REF, "add", "-f", "-C", blob, commit)
    except git.GitCommandError as exc:
        raise notes_failure(repo, exc) from None


def dump_event(event: dict) -> str:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"))


def _note_text(blob: bytes, commit: str) -> str:
    try:
        return blob.decode("utf-8")
    except UnicodeDecodeError:
        raise LineageError(f"lineage note on commit {commit[:12]} is not UTF-8 text; {repair_hint(commit)}") from None


def read_all_events(repo: git.Repo, root: Path, *, errors: list[LineageError] | None = None,
                    sources: dict[str, set[str]] | None = None) -> dict[str, list[dict]]:
    """version -> its events (deduplicated by id, in time order), from every note.

    Events are grouped by their `version` field, not by the commit they sit on,
    so an event written before its version's commit moved still counts.
    A note that does not parse raises LineageError, or, when `errors` is given,
    is appended there and skipped (so `evo fsck` reports every bad note).
    `sources`, when given, is filled with version -> the commits its events sit on.
    """
    listing = notes_list(repo)
    blobs = cat_file_batch(root, [blob for blob, _ in listing])
    by_version: dict[str, list[dict]] = {}
    sources = {} if sources is None else sources
    seen: set[tuple[str, str]] = set()
    for blob, commit in listing:
        try:
            parsed = parse_note(_note_text(blobs[blob], commit), commit)
        except LineageError as exc:
            if errors is None:
                raise
            errors.append(exc)
            continue
        for event in parsed:
            key = (event["version"], event["id"])
            if key in seen:
                continue
            seen.add(key)
            by_version.setdefault(event["version"], []).append(event)
            sources.setdefault(event["version"], set()).add(commit)
    # One note is already in append order; only lines gathered from several
    # notes (a move interrupted by a kill, merged clones) need ordering by time.
    for version, events in by_version.items():
        if len(sources[version]) > 1:
            events.sort(key=event_sort_key)
    return by_version


def append_line(repo: git.Repo, commit: str, event: dict) -> bool:
    """Append `event` to the note on `commit` unless its id is there; caller holds the lock."""
    text = read_note(repo, commit)
    for existing in parse_note(text, commit):
        if existing["id"] == event["id"] and existing["version"] == event["version"]:
            return False
    if text and not text.endswith("\n"):
        text += "\n"
    write_note(repo, commit, text + dump_event(event) + "\n")
    return True


def move_version_lines(repo: git.Repo, version: str, old: str, new: str) -> int:
    """Move `version`'s lines from the note on `old` to the note on `new`; caller holds the lock.

    Keeps the contract that a version's events sit on its head commit after
    `commit_version` moves the head. Returns the number of lines moved.
    """
    if old == new:
        return 0
    old_text = read_note(repo, old)
    if not old_text:
        return 0
    keep, move = [], []
    for line, event in zip([ln for ln in old_text.splitlines() if ln.strip()], parse_note(old_text, old)):
        (move if event["version"] == version else keep).append(line)
    if not move:
        return 0
    new_text = read_note(repo, new)
    existing = {(e["version"], e["id"]) for e in parse_note(new_text, new)}
    add = [ln for ln in move if (version, json.loads(ln)["id"]) not in existing]
    if new_text and not new_text.endswith("\n"):
        new_text += "\n"
    # Write the destination first: a kill between the two writes leaves a
    # duplicate (deduplicated by id on read), never a lost line.
    if add:
        write_note(repo, new, new_text + "".join(ln + "\n" for ln in add))
    write_note(repo, old, "".join(ln + "\n" for ln in keep))
    return len(move)


def remove_version_lines(repo: git.Repo, version: str, commit: str) -> int:
    """Drop `version`'s lines from the note on `commit`; caller holds the lock."""
    text = read_note(repo, commit)
    if not text:
        return 0
    lines = [ln for ln in text.splitlines() if ln.strip()]
    events = parse_note(text, commit)
    keep = [ln for ln, ev in zip(lines, events) if ev["version"] != version]
    if len(keep) != len(lines):
        write_note(repo, commit, "".join(ln + "\n" for ln in keep))
    return len(lines) - len(keep)
