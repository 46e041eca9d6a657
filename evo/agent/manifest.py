"""The intervention manifest: what an agent changed in a candidate, and why.

Every backend ends with one manifest (schema: `evo/schemas/manifest.schema.json`).
LLM and CLI agents write it as JSON to `<worktree>/.evo/manifest.json`, which the
worktree's `.gitignore` keeps out of the commit; the heuristic returns it
directly (and writes the same file, so every backend leaves the same trace).
An agent that finds nothing worth changing writes `{"kind": "none", "reason": ...}`.
"""

from __future__ import annotations

import json
from pathlib import Path

from evo.errors import AgentError
from evo.schemas import validate

MANIFEST_RELPATH = ".evo/manifest.json"
USAGE_RELPATH = ".evo/usage.json"


def manifest_path(worktree: str | Path) -> Path:
    return Path(worktree) / MANIFEST_RELPATH


def clear_manifest(worktree: str | Path) -> Path:
    """Remove a stale manifest before an agent runs, so an old one is never read as new."""
    path = manifest_path(worktree)
    path.unlink(missing_ok=True)
    return path


def normalize_manifest(manifest: dict, *, source: str = MANIFEST_RELPATH) -> dict:
    """Validate against the schema and return a copy with `evidence` as {findings, metrics}."""
    if not isinstance(manifest, dict):
        raise AgentError(f"{source}: expected a JSON object, found {type(manifest).__name__}")
    validate(manifest, "manifest", source=source, error_cls=AgentError)
    out = dict(manifest)
    evidence = out["evidence"]
    if isinstance(evidence, list):
        evidence = {"findings": list(evidence), "metrics": {}}
    out["evidence"] = {"findings": list(evidence.get("findings", [])), "metrics": dict(evidence.get("metrics", {}))}
    return out


def write_manifest(worktree: str | Path, manifest: dict) -> Path:
    path = manifest_path(worktree)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return path


def read_manifest(worktree: str | Path, *, agent: str) -> dict | None:
    """Read the manifest an agent wrote; None when it declared that nothing is warranted.

    Raises AgentError (one line) when the file is missing, is not JSON, or fails the schema.
    """
    path = manifest_path(worktree)
    if not path.exists():
        raise AgentError(
            f"{agent} agent finished without writing {MANIFEST_RELPATH} in {worktree}; "
            'the prompt asks it to write the manifest there (or {"kind": "none", "reason": ...})'
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise AgentError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}); the agent must write one JSON object") from None
    if isinstance(data, dict) and data.get("kind") == "none":
        return None
    return normalize_manifest(data, source=str(path))

