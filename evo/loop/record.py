"""The last two phases: decide (promote / prune / keep, by `evo.loop.decide`'s rules) and record.

`record` regenerates memory from the lineage, records the skill's evidence
(the attributed outcome), puts main's files back when a person's edit was not
promoted, and commits it all on main.
"""

from __future__ import annotations

import json
from pathlib import Path

from evo.errors import VersionError
from evo.loop import versions as V
from evo.loop.decide import decide
from evo.loop.journal import Journal, fault_point
from evo.settings import artifact_dir
from evo.vocabulary import Action, event_id


def decide_version(ws, version: str, judged: dict, harness_only: bool) -> dict:
    records = ws.lineage.read_all()
    dec = decide(version, judged, harness_only=harness_only,
                 frontier=V.frontier(records, exclude=version), frontier_size=ws.config.search.frontier_size)
    apply_decision(ws, version, dec.action, dec.reason, dec.also_prune)
    return {"action": Action(dec.action).recorded, "reason": dec.reason,
            "also_pruned": [v for v, _ in dec.also_prune]}


def apply_decision(ws, version: str, action: str, reason: str, also_prune: list) -> None:
    # Checked by event, not state: promote() and prune() finish a transition a kill left half-done.
    record = ws.lineage.record(version)
    if action == Action.PROMOTE and record.last("promoted") is None:
        ws.lineage.promote(version, reason)
    elif action == Action.PRUNE and record.last("pruned") is None:
        ws.lineage.prune(version, reason)
    elif action == Action.KEEP:
        ws.lineage.append_event(version, {"id": event_id(version, "kept"), "event": "kept",
                                            "version": version, "reason": reason})
    fault_point("decide", "mid")  # decided in git, not yet in the journal
    for other, why in also_prune:
        if ws.lineage.record(other).last("pruned") is None:
            ws.lineage.prune(other, why)


def record(ws, journal: Journal, version: str, manifest: dict | None, outcome: str | None = None) -> dict:
    from evo.agent.memory import update_memory
    from evo.agent.skills import update_skill_evidence

    records = ws.lineage.read_all()
    diagnoses = {}
    for name in records:
        path = artifact_dir(ws.root, ws.settings, name) / "diagnosis.json"
        if path.exists():
            diagnoses[name] = json.loads(path.read_text())
    changed = [Path(p) for p in update_memory(ws.root, V.lineage_summaries(records), diagnoses)]
    if manifest and manifest.get("skill") and outcome:
        changed += update_skill_evidence(ws.root / "skills", manifest["skill"], version, outcome,
                                         ws.settings["domain"], supersedes=manifest.get("remeasures"))
    paths = {str(p.resolve().relative_to(ws.root)) if p.is_absolute() else str(p) for p in changed}
    fault_point("record", "mid")  # memory written, not committed
    # A resumed record finds its files already written (nothing "changed"): commit what is still dirty.
    paths |= {p for p in ws.lineage.dirty_paths() if p.startswith(("memory/", "skills/"))}
    human = journal.data.get("human")
    if human and ws.lineage.record(version).last("promoted") is None:
        # A person's edit that was not promoted lives on in its version's branch; main is the head's again.
        for rel in human["paths"]:
            try:
                text = ws.lineage.file_at(journal.parents[0], rel)
            except VersionError:
                (ws.root / rel).unlink(missing_ok=True)
                continue
            (ws.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws.root / rel).write_text(text, encoding="utf-8")
        paths |= set(human["paths"])
    paths = sorted(paths)
    message = f"evo: record {version}" + (f"; your edit on main is kept as {version}, main's files are "
                                           f"{journal.parents[0]}'s again" if human and paths else "")
    sha = ws.lineage.commit_main(message, paths) if paths else None
    return {"commit": sha, "paths": paths}
