"""The step journal: what a running `evo step` has done, so a killed step resumes.

`.evo/journal/current.json` holds the in-flight step: its version, parents, the
phases completed and each phase's result. Every write is atomic (temp file +
rename), so a `kill -9` leaves either the old or the new journal, never half of
one. A finished step's journal moves to `.evo/journal/done/<version>.json`.

Every side effect a phase has is idempotent (branch creation, the version
commit, note events keyed by id, training that resumes from its checkpoint), so
re-running the phase that was interrupted is always safe.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evo.errors import WorkspaceError
from evo.fileio import write_json

# Fault injection for the resumption tests: EVO_FAULT_KILL_AT=<phase> kills the
# process with SIGKILL when that phase starts; <phase>:end kills it after the
# phase's result is journaled. Never set outside tests.
_KILL_ENV = "EVO_FAULT_KILL_AT"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _atomic_write(path: Path, data: dict) -> None:
    write_json(data, path, fsync=True)  # a resumed step trusts the journal: durable before the rename


def fault_point(phase: str, when: str) -> None:
    """Kill this process here if the fault-injection variable asks for it."""
    target = os.environ.get(_KILL_ENV)
    if not target:
        return
    name, _, at = target.partition(":")
    if name == phase and (at or "start") == when:
        os.kill(os.getpid(), signal.SIGKILL)


class Journal:
    """The journal of one in-flight step."""

    def __init__(self, root: Path, data: dict):
        self.root = Path(root)
        self.data = data

    # -- location -------------------------------------------------------
    @staticmethod
    def path_for(root: Path) -> Path:
        return Path(root) / ".evo" / "journal" / "current.json"

    @property
    def path(self) -> Path:
        return self.path_for(self.root)

    # -- life cycle -----------------------------------------------------
    @classmethod
    def load(cls, root: Path) -> "Journal | None":
        path = cls.path_for(root)
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise WorkspaceError(
                f"{path}: unreadable step journal ({exc.msg}); remove it to abandon the interrupted step"
            ) from None
        return cls(root, data)

    @classmethod
    def start(cls, root: Path, version: str, parents: list[str]) -> "Journal":
        journal = cls(
            root,
            {
                "version": version,
                "parents": list(parents),
                "phase": "observe",
                "started": _now(),
                "pid": os.getpid(),
                "phases_done": [],
                "results": {},
            },
        )
        journal.save()
        return journal

    def save(self) -> None:
        self.data["pid"] = os.getpid()
        _atomic_write(self.path, self.data)

    def finish(self) -> Path:
        """Archive the journal of a completed step; returns the archive path."""
        done = self.path.parent / "done" / f"{self.data['version']}.json"
        self.data["finished"] = _now()
        self.data["phase"] = "done"
        _atomic_write(done, self.data)
        self.path.unlink(missing_ok=True)
        return done

    def abandon(self) -> None:
        self.path.unlink(missing_ok=True)

    # -- phases ---------------------------------------------------------
    @property
    def version(self) -> str:
        return self.data["version"]

    @property
    def parents(self) -> list[str]:
        return self.data["parents"]

    def is_done(self, phase: str) -> bool:
        return phase in self.data["phases_done"]

    def result(self, phase: str, default: Any = None) -> Any:
        return self.data["results"].get(phase, default)

    def begin(self, phase: str) -> None:
        self.data["phase"] = phase
        self.save()
        fault_point(phase, "start")

    def complete(self, phase: str, result: Any = None) -> None:
        self.data["results"][phase] = result
        if phase not in self.data["phases_done"]:
            self.data["phases_done"].append(phase)
        self.save()
        fault_point(phase, "end")
