"""File locks: the workspace-wide writer lock and the lineage-notes lock.

Both use `fcntl.flock`, which the kernel releases when the holding process
dies, so a lock left behind by a killed `evo step` is taken over by the next
writer without any stale-lock cleanup. The holder's pid, purpose and start time
are written into the lock file so a second writer can say who is in the way.

Locks are re-entrant within one thread (keyed by resolved path and thread):
the loop holds the workspace lock for a whole step and may call library code
that takes it again, and a second `flock` on a new file description would
block on itself. Other threads of the same process still exclude each other.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from evo.errors import LockedError

WORKSPACE_LOCK = Path(".evo") / "lock"

_held: dict[tuple[str, int], int] = {}  # (resolved lock path, thread id) -> re-entry depth
_held_guard = threading.Lock()


def _describe_holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        info = {}
    pid = info.get("pid", "?")
    purpose = info.get("purpose", "unknown")
    since = info.get("since", "")
    since_local = since
    try:
        since_local = datetime.fromisoformat(since.replace("Z", "+00:00")).astimezone().strftime("%H:%M:%S")
    except ValueError:
        pass
    return f"pid {pid}, {purpose!r}, since {since_local or '?'}"


@contextmanager
def file_lock(path: str | Path, purpose: str, *, wait_s: float = 0.0) -> Iterator[Path]:
    """Hold an exclusive flock on `path`, waiting up to `wait_s` seconds.

    Raises LockedError naming the holder when the lock stays taken.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = (str(path.resolve()), threading.get_ident())
    with _held_guard:
        if _held.get(key):
            _held[key] += 1
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield path
        finally:
            with _held_guard:
                _held[key] -= 1
        return

    # "a+" so opening never truncates the current holder's description.
    fh = open(path, "a+", encoding="utf-8")
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockedError(
                        f"another evo process ({_describe_holder(path)}) holds {path}; wait for it to finish"
                    ) from None
                time.sleep(0.01)
        fh.seek(0)
        fh.truncate()
        since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        fh.write(json.dumps({"pid": os.getpid(), "purpose": purpose, "since": since}))
        fh.flush()
        with _held_guard:
            _held[key] = 1
        try:
            yield path
        finally:
            with _held_guard:
                _held.pop(key, None)
            fh.seek(0)
            fh.truncate()
            fh.flush()
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    finally:
        fh.close()


@contextmanager
def workspace_lock(root: str | Path, purpose: str) -> Iterator[Path]:
    """The workspace-wide writer lock (`.evo/lock`); fails at once if taken.

    `purpose` is shown to a second writer, e.g. 'evo step' or 'evo promote v3'.
    """
    with file_lock(Path(root) / WORKSPACE_LOCK, purpose) as path:
        yield path
