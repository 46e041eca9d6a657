"""Run untrusted analyzers out of the orchestrator's process, confined, with limits.

A workspace's analyzers are code the trainer agent may have written. They run
in a separate process (`evo.harness.worker`) inside a jail (`evo.confine`):
the run folders they analyse and their own files visible read-only, the
interpreter and installed packages read-only, no network, an empty private
/tmp, nothing else of the host (no workspace, no journal, no home folder), a
scrubbed environment and an unprivileged uid. Their address space is capped
(`harness.analyzer_memory_mb`) and each analyzer has a wall-clock budget
(`harness.analyzer_timeout_s`): a hung, crashed, exiting or over-budget
analyzer is killed (with everything it started) and becomes an error result
naming the cause; the worker is restarted for the analyzers after it.

Results cross a pipe as JSON and are validated here, in the orchestrator,
with the same checks as in-process results (`evo.harness.loader.check_output`);
a result for an analyzer this process was not asked to run is ignored. Where
bubblewrap is missing the worker still runs out of process with the limits
and a scrubbed environment, and the diagnosis says the filesystem was not
confined.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from evo.harness.loader import AnalyzerFile, AnalyzerResult, BadResult, check_output, discover, prepare, split_by_trust

MAX_LINE = 8 * 1024 * 1024  # one analyzer's result; past it the analyzer is stopped
STDERR_TAIL = 2000


def _worker_code() -> str:
    """The worker's `-c` program: import the evo this process runs, whichever copy that is.

    `-I` ignores PYTHONPATH, so without the explicit path a host running a second
    checkout (PYTHONPATH, a clone) would start a worker that imports the venv's
    installed evo instead (or, jailed, none: only this copy's folder is bound),
    and analyzers would be judged by other code than the host's.
    """
    from evo import confine

    home = os.path.dirname(confine.evo_package_dir())
    return f"import sys; sys.path.insert(0, {home!r}); from evo.harness import worker; worker.main()"


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 120.0
    memory_mb: int = 4096

    @classmethod
    def from_settings(cls, settings: dict | None) -> "Limits":
        h = (settings or {}).get("harness") or {}
        return cls(float(h.get("analyzer_timeout_s", cls.timeout_s)), int(h.get("analyzer_memory_mb", cls.memory_mb)))


def confined() -> bool:
    """Whether workers get a jail on this machine (bubblewrap works)."""
    from evo import confine

    return confine.available()


def run_isolated(files: list[AnalyzerFile], job: dict, limits: Limits, *, mode: str = "analyze") -> list[AnalyzerResult]:
    """Run `files` in confined worker processes; one validated AnalyzerResult per file, in order.

    `job`: what the worker builds its `ctx` from (run folders, recipe, settings,
    lineage, changed paths, version). `mode="load"` imports and checks each file
    without calling `analyze` (for `evo validate`).
    """
    pending = list(files)
    done: dict[str, AnalyzerResult] = {}
    while pending:
        finished = _one_worker(pending, job, limits, mode)
        done.update(finished)
        pending = [f for f in pending if f.name not in done]
    return [done[f.name] for f in files]


def _error(f: AnalyzerFile, message: str) -> AnalyzerResult:
    return AnalyzerResult(f.name, f.path, audit=f.name.startswith("audit_"), status="error", error=message)


def _jail(files: list[AnalyzerFile], job: dict):
    from evo import confine

    readable = {str(Path(job[k]).resolve()) for k in ("run_dir", "parent_run_dir", "promoted_run_dir") if job.get(k)}
    readable |= {str(f.path.resolve().parent) for f in files}
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "TMPDIR": "/tmp",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "MPLCONFIGDIR": "/tmp"}
    data = Path(__file__).resolve().parents[1] / "data" / "domains"  # task splits: no analyzer needs the answers
    return confine.Jail(read_only=tuple(sorted(readable)), hidden=(str(data),), python=True, site_packages=True,
                        network=False, env=env, cwd="/tmp", tmp_mb=256)


def _start(files: list[AnalyzerFile], job: dict) -> tuple[subprocess.Popen, bool]:
    """(worker process, confined?)."""
    from evo import confine

    argv = [sys.executable, "-I", "-c", _worker_code()]
    kwargs = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    if confine.available():
        return confine.popen(argv, _jail(files, job), **kwargs), True
    scratch = tempfile.mkdtemp(prefix="evo-analyzers-")
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": scratch, "TMPDIR": scratch, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.Popen(argv, env=env, cwd=scratch, **kwargs), False


def _stop(proc: subprocess.Popen, jailed: bool) -> int:
    from evo import confine

    if jailed:
        return confine.kill(proc)
    try:
        os.killpg(proc.pid, 9)
    except OSError:
        pass
    return proc.wait()


def _one_worker(pending: list[AnalyzerFile], job: dict, limits: Limits, mode: str) -> dict[str, AnalyzerResult]:
    """Run what one worker gets through; the analyzer it died on (if any) gets its error result."""
    by_name = {f.name: f for f in pending}
    payload = dict(job, files=[{"name": f.name, "path": str(f.path.resolve())} for f in pending],
                   memory_mb=limits.memory_mb, mode=mode)
    try:
        proc, jailed = _start(pending, job)
    except Exception as exc:  # noqa: BLE001 - no worker at all: every analyzer reports why
        return {f.name: _error(f, f"could not start the analyzer process ({type(exc).__name__}: {exc})") for f in pending}
    results: dict[str, AnalyzerResult] = {}
    current, started = None, time.monotonic()
    buffer, stderr = bytearray(), bytearray()
    sel = selectors.DefaultSelector()
    try:
        try:
            proc.stdin.write(json.dumps(payload, default=str).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        why = None
        while sel.get_map():
            budget = limits.timeout_s if current else max(limits.timeout_s, 60.0)  # start-up imports
            remaining = started + budget - time.monotonic()
            if remaining <= 0:
                why = f"timed out after {budget:g} s (harness.analyzer_timeout_s)"
                break
            for key, _ in sel.select(timeout=min(remaining, 0.5)):
                chunk = os.read(key.fileobj.fileno(), 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                if key.data == "err":
                    stderr += chunk
                    del stderr[:-STDERR_TAIL]
                    continue
                buffer += chunk
                while b"\n" in buffer:
                    line, _, rest = bytes(buffer).partition(b"\n")
                    buffer = bytearray(rest)
                    current, started = _take(line, by_name, results, current, started)
                if len(buffer) > MAX_LINE:
                    why = f"its result exceeded {MAX_LINE // (1024 * 1024)} MB"
                    break
            if why:
                break
        code = _stop(proc, jailed)
        if why is None and current is not None and current not in results:
            why = f"its process exited (code {code}) before it returned" + _tail(stderr)
        elif why is None and not results and code != 0:
            why = f"the analyzer process failed to start (code {code})" + _tail(stderr)
        if why:
            victims = [current] if current else [f.name for f in pending if f.name not in results]
            for name in victims:
                results[name] = _error(by_name[name], why)
        if not jailed:
            for r in results.values():
                r.note = ((r.note + "; ") if r.note else "") + "ran unconfined: bubblewrap is not available here"
    finally:
        sel.close()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream and not stream.closed:
                stream.close()
    return results


def _tail(stderr: bytearray) -> str:
    lines = [ln for ln in bytes(stderr).decode("utf-8", "replace").splitlines() if ln.strip()]
    return f"; last stderr line: {lines[-1][:200]}" if lines else ""


def _take(line: bytes, by_name: dict, results: dict, current, started):
    """Handle one channel line; returns the (current analyzer, its start time)."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return current, started
    if not isinstance(message, dict):
        return current, started
    if "start" in message and message["start"] in by_name and message["start"] not in results:
        return message["start"], time.monotonic()
    raw = message.get("result")
    if isinstance(raw, dict) and raw.get("file") == current:
        results[current] = _validated(by_name[current], raw)
        return None, time.monotonic()
    return current, started


def _validated(f: AnalyzerFile, raw: dict) -> AnalyzerResult:
    """The worker's report re-checked here: declarations, then the output, exactly as in-process."""
    from evo.harness.kit import LAYERS

    result = AnalyzerResult(f.name, f.path, audit=bool(raw.get("audit")) or f.name.startswith("audit_"))
    result.seconds = float(raw.get("seconds") or 0.0) if isinstance(raw.get("seconds"), (int, float)) else 0.0
    layer = raw.get("layer")
    result.layer = layer if layer in LAYERS else ""
    if isinstance(raw.get("name"), str) and raw["name"]:
        result.name = raw["name"][:100]
    if raw.get("status") != "ok":
        result.status, result.error = "error", str(raw.get("error") or "failed")[:500]
        return result
    if not result.layer:
        result.status, result.error = "error", f"module-level LAYER must be one of {', '.join(LAYERS)}, got {layer!r}"
        return result
    try:
        check_output(raw.get("output"), result)
    except BadResult as exc:
        result.status, result.error = "error", str(exc)
        result.metrics, result.findings, result.vetoes = {}, [], []
    return result


def load_analyzers(dirs: Iterable[str | Path], settings: dict | None = None) -> tuple[list[dict], list[dict]]:
    """Import every analyzer in `dirs` without running it (for `evo validate` and CI).

    Importing is running: a workspace's own files are imported in a confined
    process (`evo.harness.isolation`, mode "load"), the shipped ones here.
    Returns (analyzers, problems): [{name, path, layer, audit, overrides}] and
    [{file, error}] for files that fail to import or break the contract.
    """
    files = discover(dirs)
    trusted, untrusted, refused = split_by_trust(files)
    results = {f.name: prepare(f)[0] for f in trusted}
    if untrusted:
        results.update({r_file.name: r for r_file, r in zip(untrusted, run_isolated(
            untrusted, {}, Limits.from_settings(settings), mode="load"))})
    analyzers, problems = [], []
    for f in files:
        result = results[f.name]
        if f in refused:
            problems.append({"file": str(f.path), "error": f"replaces the built-in audit {f.name}; audits run from the shipped code"})
        elif result.status == "error":
            problems.append({"file": str(f.path), "error": result.error})
        else:
            analyzers.append({"name": result.name, "path": str(f.path), "layer": result.layer, "audit": result.audit,
                              "overrides": str(f.overrides) if f.overrides else None})
    return analyzers, problems
