"""After an untrusted agent ran: did anything outside its worktree change?

The agent's jail (`evo.agent.jail`) makes the workspace read-only, so this
should never find anything; it is the check that holds where the jail does not
(`agent.sandbox.confine: false`, a machine without bubblewrap) and the proof
that it held. Before the agent starts the loop takes a `snapshot`; afterwards
`changes` lists, one line each:

- any git ref that moved (main, version branches, tags, the lineage notes);
- any file of main's checkout that changed (evo.yaml, recipe.yaml, analyzers, ...);
- the step journal;
- any artifact the judge will read whose content no longer matches the sha256
  recorded in the lineage (the parent's runs, its controls, the base model's
  evaluation), and any file of a control run the step may clone and evaluate
  again (the parent's and, below a harness revision, its ancestors'), the
  checkpoint's weights included, and every file of the parent's own run, whose
  checkpoint (weights and optimizer moments) the candidate trains on from (a
  repair's older start is checked when it trains: `evo.loop.training._init_of`).

A candidate whose agent changed any of these is rejected with that reason and
pruned, and main's files are put back (`Lineage.restore_main_paths`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from evo.loop import runs as R
from evo.loop import versions as V
from evo.loop.journal import Journal
from evo.settings import artifact_dir, artifact_root


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def judged_runs(root: Path, settings: dict, records: dict, parent: str) -> list[Path]:
    """The run folders whose evidence a candidate of `parent` is judged on, but for controls (`control_runs`) and
    the parent's own runs (`start_runs`), whose every file is checked."""
    folders = [artifact_root(root, settings) / ev["run"] for ev in R.replicate_events(records.get(parent)).values()]
    folders.append(artifact_dir(root, settings, V.BASE))
    return folders


def snapshot(lineage, root: Path, settings: dict, parent: str) -> dict:
    state = lineage.checkout_state()
    return {"refs": state["refs"], "dirty": state["dirty"], "journal": _digest(Journal.path_for(root)),
            "parent": parent}


def changes(lineage, root: Path, settings: dict, before: dict) -> tuple[list[str], list[str]]:
    """(one line per thing changed outside the worktree, main's paths that changed)."""
    after = lineage.checkout_state()
    lines = []
    for ref in sorted(set(before["refs"]) | set(after["refs"])):
        if before["refs"].get(ref) != after["refs"].get(ref):
            lines.append(f"git ref {ref} moved ({(before['refs'].get(ref) or 'none')[:12]} -> "
                         f"{(after['refs'].get(ref) or 'deleted')[:12]})")
    touched = sorted(set(after["dirty"]) - set(before["dirty"]))
    if touched:
        lines.append("main's checkout changed: " + ", ".join(touched[:8]) + (" ..." if len(touched) > 8 else ""))
    if _digest(Journal.path_for(root)) != before["journal"]:
        lines.append("the step journal changed")
    records = lineage.read_all()
    lines += R.verify_runs(root, settings, records, judged_runs(root, settings, records, before["parent"]))
    lines += R.verify_runs(root, settings, records, control_runs(root, settings, records, before["parent"]), names=None)
    lines += R.verify_runs(root, settings, records, start_runs(root, settings, records, before["parent"]), names=None)
    return lines, touched


def start_runs(root: Path, settings: dict, records: dict, parent: str) -> list[Path]:
    """The parent's own runs (below a harness revision, the ancestor's whose policy it is): the judge reads
    their evaluation, and a candidate and its control train on from their checkpoint, whose weights and AdamW
    moments (`evo.train.checkpoint.adopt_optimizer`) steer every update after."""
    return [artifact_dir(root, settings, name) for name in V.policy_source(records, parent)]


def control_runs(root: Path, settings: dict, records: dict, parent: str) -> list[Path]:
    """The control runs a candidate of `parent` is judged against or that the step may clone instead of
    training (the parent's, for a continuation; an ancestor's below a harness revision). A clone is evaluated
    again, so every recorded file of these, the checkpoint's weights included, is evidence."""
    return [artifact_root(root, settings) / ev["run"] for name in V.policy_source(records, parent)
            for ev in R.control_events(records.get(name)).values()]
