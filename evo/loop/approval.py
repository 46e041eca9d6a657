"""`evo approve` / `evo reject` for versions waiting at the cost gate."""

from __future__ import annotations

from pathlib import Path

from evo.errors import VersionError
from evo.loop.journal import Journal
from evo.vocabulary import event_id


def _awaiting(lineage, version: str):
    records = lineage.read_all()
    if version not in records:
        raise VersionError(f"unknown version {version!r}; `evo log` lists the versions")
    rec = records[version]
    # By events, not state: a baseline waiting to be trained is promoted and waiting at once.
    last_gate = max((i for i, ev in enumerate(rec.events) if ev["event"] == "gated"), default=-1)
    decided = any(ev["event"] in ("approved", "rejected") for ev in rec.events[last_gate + 1:])
    if last_gate < 0 or rec.events[last_gate].get("status") != "awaiting-approval" or decided:
        raise VersionError(f"{version} is not awaiting approval (state: {rec.state}); nothing to approve or reject")
    return rec


def approve(root: Path, version: str, reason: str, by: str = "user") -> dict:
    from evo.lineage import Lineage
    from evo.lineage.lock import workspace_lock

    lineage = Lineage.open(root)
    with workspace_lock(root, "evo approve"):
        _awaiting(lineage, version)
        lineage.append_event(version, {"id": event_id(version, "approved"), "event": "approved", "version": version,
                                       "reason": reason, "by": by})
    return {"version": version, "approved": True, "reason": reason}


def reject(root: Path, version: str, reason: str, by: str = "user") -> dict:
    from evo.lineage import Lineage
    from evo.lineage.lock import workspace_lock

    lineage = Lineage.open(root)
    with workspace_lock(root, "evo reject"):
        rec = _awaiting(lineage, version)
        lineage.append_event(version, {"id": event_id(version, "rejected"), "event": "rejected", "version": version,
                                       "reason": reason, "by": by})
        if rec.parents:  # a candidate is pruned as evidence; the baseline simply stays untrained
            lineage.prune(version, f"rejected at the cost gate: {reason}")
        journal = Journal.load(root)
        if journal is not None and journal.version == version:
            journal.finish()
    return {"version": version, "rejected": True, "pruned": bool(rec.parents), "reason": reason}
