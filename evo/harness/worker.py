"""The analyzer process: runs workspace analyzers for `evo.harness.isolation`, confined.

Started as ``python -I -c "from evo.harness import worker; worker.main()"``
inside a jail (`evo.confine`) that shows it the run folders to read, the
analyzer files and the interpreter, read-only, and nothing else. It reads one
JSON job on stdin, caps its own address space (the hard limit too, so an
analyzer cannot raise it back), and for each analyzer writes two JSON lines on
its result channel: ``{"start": name}`` and ``{"result": {...}}`` — the raw
output of `analyze(ctx)`, which the orchestrator validates again before any
of it is used. Analyzers printing to stdout cannot corrupt the channel: fd 1
is pointed at stderr before any analyzer is imported.

Nothing here is trusted by the orchestrator; it is the analyzers' process.
"""

from __future__ import annotations

import json
import os
import sys


def _limit_memory(megabytes: int) -> None:
    import resource

    cap = int(megabytes) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _context(job: dict):
    from evo.harness.context import AnalyzerContext, RunArtifacts

    def run(key):
        return RunArtifacts(job[key]) if job.get(key) else None

    return AnalyzerContext(run=run("run_dir"), recipe=job.get("recipe") or {}, parent=run("parent_run_dir"),
                           promoted=run("promoted_run_dir"), lineage=job.get("lineage") or [],
                           settings=job.get("settings") or {}, changed_paths=tuple(job.get("changed_paths") or ()),
                           declared_harness_revision=bool(job.get("declared_harness_revision")),
                           version=job.get("version") or "")


def _raw(file: str, result, out) -> dict:
    """What crosses the channel: the declarations and the output as JSON (non-finite metrics named, not sent)."""
    import math

    from evo.fileio import jsonable

    if isinstance(out, dict) and isinstance(out.get("metrics"), dict):
        metrics, dropped = {}, []
        for key, value in out["metrics"].items():
            try:
                finite = math.isfinite(float(value))
            except (TypeError, ValueError):
                finite = True  # not a number: the orchestrator's check names it
            (metrics.__setitem__(key, value) if finite else dropped.append(str(key)))
        out = dict(out, metrics=metrics)
        if dropped:
            out["note"] = "; ".join(filter(None, [str(out.get("note") or ""), f"dropped non-finite metrics: {', '.join(sorted(dropped))}"]))
    return {"file": file, "name": result.name, "layer": result.layer, "audit": result.audit, "status": result.status,
            "error": result.error, "seconds": result.seconds, "output": jsonable(out) if out is not None else None}


def main() -> None:
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # an analyzer's print() goes to stderr, never into the result channel
    sys.stdout = sys.stderr
    job = json.loads(sys.stdin.read())
    _limit_memory(job["memory_mb"])

    from pathlib import Path

    from evo.harness.loader import AnalyzerFile, _fail, prepare

    ctx = _context(job)
    for item in job["files"]:
        channel.write(json.dumps({"start": item["name"]}) + "\n")
        result, module = prepare(AnalyzerFile(item["name"], Path(item["path"])))
        out = None
        if module is not None:
            if job.get("mode") == "load":
                out = {}
            else:
                try:
                    out = module.analyze(ctx)
                except BaseException as exc:  # noqa: BLE001 - reported, never raised
                    _fail(result, exc)
        try:
            line = json.dumps({"result": _raw(item["name"], result, out)}, allow_nan=False)
        except (TypeError, ValueError) as exc:
            result.status, result.error = "error", f"result is not JSON ({exc})"
            line = json.dumps({"result": _raw(item["name"], result, None)})
        channel.write(line + "\n")
    channel.close()
