"""Read-side helpers the loop needs about versions: parent choice, recipes,
checkpoints and the lineage summaries handed to agents.

Pure functions over lineage records (from `Lineage.read_all()`) and the
artifact folders; no git writes here.
"""

from __future__ import annotations

import json
from pathlib import Path

from evo.errors import VersionError
from evo.recipe import parse_recipe
from evo.settings import artifact_dir

LINK_FILE = "link.json"  # a harness-only version's pointer to the checkpoint it reuses


def _events(record, kind: str) -> list[dict]:
    return [ev for ev in record.events if ev.get("event") == kind]


def last_event(record, kind: str) -> dict | None:
    found = _events(record, kind)
    return found[-1] if found else None


def promoted_head(records: dict) -> str:
    """The name of the version main reflects (latest promotion not reverted)."""
    from evo.lineage import Lineage

    head = Lineage.promoted_head(records)
    if head is None:
        raise VersionError("no promoted version in this workspace; promote one with `evo promote vN`")
    return head.name


def _num(version: str) -> int:
    return int(version[1:]) if version[1:].isdigit() else -1


def frontier(records: dict, exclude: str = "") -> list:
    from evo.lineage import Lineage

    return [rec for rec in Lineage.frontier(records) if rec.name != exclude]


def last_transition(records: dict) -> dict | None:
    """The `judged` event of the most recent *policy* candidate (the last outcome).

    Harness-only revisions are skipped: they re-evaluate the parent's own
    policy, so their `insufficient` says nothing about an intervention, and
    letting it trigger another reflection would revise the harness forever.
    """
    judged = []
    for name, rec in records.items():
        ev = last_event(rec, "judged")
        created = last_event(rec, "created") or {}
        if name == "v0" or not ev or (created.get("intervention") or {}).get("kind") == "harness":
            continue
        judged.append((_num(name), ev, name))
    if not judged:
        return None
    _, ev, name = max(judged, key=lambda item: item[0])
    return {**ev, "version": name}


def lineage_summaries(records: dict) -> list[dict]:
    out = []
    for name in sorted(records, key=_num):
        rec = records[name]
        judged = last_event(rec, "judged") or {}
        created = last_event(rec, "created") or {}
        out.append(
            {
                "name": name,
                "parents": list(rec.parents),
                "state": rec.state,
                "intervention": created.get("intervention"),
                "harness_revision": created.get("harness_revision"),
                "outcome": judged.get("outcome"),
                "headline": judged.get("headline"),
            }
        )
    return out


def recipe_of(lineage, version: str) -> dict:
    return parse_recipe(lineage.file_at(version, "recipe.yaml"), source=f"{version}:recipe.yaml")


def run_dir(root: Path, settings: dict, version: str) -> Path:
    return artifact_dir(root, settings, version)


def is_evaluated(root: Path, settings: dict, version: str) -> bool:
    return (run_dir(root, settings, version) / "eval.json").exists()


def checkpoint_of(root: Path, settings: dict, version: str, recipe: dict | None = None) -> str:
    """The checkpoint a version's policy lives in (following harness-only links).

    Falls back to the recipe's base model for a version that never trained.
    """
    seen = set()
    current = version
    while current not in seen:
        seen.add(current)
        folder = run_dir(root, settings, current)
        ckpt = folder / "checkpoint"
        if (ckpt / "config.json").exists():
            return str(ckpt)
        link = folder / LINK_FILE
        if link.exists():
            current = json.loads(link.read_text())["version"]
            continue
        break
    if recipe is not None:
        return recipe["model"]["name"]
    raise VersionError(f"{version} has no checkpoint under {run_dir(root, settings, version)}; run `evo step` to train it")


def write_link(root: Path, settings: dict, version: str, source: str) -> None:
    """Record that `version` (a harness-only revision) reuses `source`'s policy."""
    folder = run_dir(root, settings, version)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LINK_FILE).write_text(json.dumps({"version": source}, indent=2))
