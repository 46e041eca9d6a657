"""Find, load and run analyzers: Python files exposing `LAYER` and `analyze(ctx)`.

Built-ins (`evo.resources.resource_dir("analyzers")`) and a workspace's own
`analyzers/` go through this same loader; a later folder's file with the same
filename replaces an earlier one, which is how a workspace overrides a
built-in. Files are loaded by path under a module name derived from the full path, so
two workspaces' `truncation.py` cannot shadow each other.

An analyzer is code the trainer agent may have just written, so nothing it does
may stop a diagnosis: import errors, exceptions and malformed results become a
`harness.analyzer_error` finding naming the file and the error.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

from evo.fileio import jsonable
from evo.harness.kit import LAYERS, MAX_EVIDENCE_ROWS, SEVERITIES, finding

LAYER_ORDER = {layer: i for i, layer in enumerate(LAYERS)}


@dataclass
class AnalyzerFile:
    """One resolved analyzer file (after workspace overrides)."""

    name: str  # filename stem, the override key
    path: Path
    overrides: Path | None = None  # the built-in this file replaced, if any


@dataclass
class AnalyzerResult:
    name: str
    path: Path
    layer: str = ""
    audit: bool = False
    status: str = "ok"  # ok | error
    error: str | None = None
    seconds: float = 0.0
    metrics: dict = field(default_factory=dict)
    findings: list = field(default_factory=list)
    vetoes: list = field(default_factory=list)
    note: str | None = None

    def record(self) -> dict:
        """The `analyzers[]` entry of diagnosis.json."""
        out = {"name": self.name, "layer": self.layer, "status": self.status, "error": self.error,
               "audit": self.audit, "path": str(self.path), "seconds": round(self.seconds, 4)}
        if self.note:
            out["note"] = self.note
        return out


def discover(dirs: Iterable[str | Path]) -> list[AnalyzerFile]:
    """Resolve `*.py` files across `dirs` in order; later folders override earlier ones by filename."""
    found: dict[str, AnalyzerFile] = {}
    seen: set[Path] = set()
    for d in dirs:
        d = Path(d).resolve()
        if d in seen or not d.is_dir():
            continue  # a workspace without its own analyzers/ simply adds nothing
        seen.add(d)
        for path in sorted(d.glob("*.py")):
            if path.name.startswith("_"):
                continue  # __init__.py, private helpers
            previous = found.get(path.stem)
            found[path.stem] = AnalyzerFile(path.stem, path.resolve(), previous.path if previous else None)
    return sorted(found.values(), key=lambda f: f.name)


def harness_version(files: Iterable[AnalyzerFile]) -> str:
    """sha256 (12 hex) over the names and contents of the analyzers in effect."""
    digest = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.name):
        digest.update(f.name.encode() + b"\0")
        digest.update(f.path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def load_module(f: AnalyzerFile) -> ModuleType:
    """Execute the file as a fresh module named after its path (so edits are always picked up).

    The module is registered in sys.modules under a name unique to its path, because
    dataclasses and pickling look modules up there; two files never share a name.
    """
    tag = hashlib.sha1(str(f.path).encode()).hexdigest()[:8]
    name = f"evo_analyzer_{tag}_{f.name}"
    spec = importlib.util.spec_from_file_location(name, f.path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {f.path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _describe(exc: BaseException) -> str:
    """`ValueError: msg (file.py:N)` — one line naming the innermost frame, where the error was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    line = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    msg = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {msg}{line}" if msg else f"{type(exc).__name__}{line}"


class BadResult(Exception):
    """An analyzer returned something that is not the documented result shape."""


def _check_metrics(metrics: Any, result: AnalyzerResult) -> dict:
    if not isinstance(metrics, dict):
        raise BadResult(f"'metrics' must be a dict of key -> number, got {type(metrics).__name__}")
    out, dropped = {}, []
    for key, value in metrics.items():
        if not isinstance(key, str) or key.split("/", 1)[0] not in LAYERS or "/" not in key:
            raise BadResult(f"metric key {key!r} is not namespaced by a layer (score/, signal/, behavior/, version/)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
            raise BadResult(f"metric {key!r} has non-numeric value {value!r}")
        is_int = isinstance(value, int) or getattr(getattr(value, "dtype", None), "kind", "") in ("i", "u")
        number = float(value)
        if not math.isfinite(number):
            dropped.append(key)
            continue
        out[key] = int(value) if is_int else number
    if dropped:
        result.note = f"dropped non-finite metrics: {', '.join(sorted(dropped))}"
    return out


def _check_finding(item: Any, default_layer: str) -> dict:
    if not isinstance(item, dict):
        raise BadResult(f"a finding must be a dict, got {type(item).__name__}")
    for key in ("id", "severity", "message"):
        if not isinstance(item.get(key), str) or not item.get(key):
            raise BadResult(f"finding {item.get('id', '?')!r}: {key!r} must be a non-empty string")
    if item["severity"] not in SEVERITIES:
        raise BadResult(f"finding {item['id']!r}: severity {item['severity']!r} is not one of {', '.join(SEVERITIES)}")
    layer = item.get("layer") or default_layer
    if layer not in LAYERS:
        raise BadResult(f"finding {item['id']!r}: layer {layer!r} is not one of {', '.join(LAYERS)}")
    evidence = item.get("evidence") or {}
    if not isinstance(evidence, dict):
        raise BadResult(f"finding {item['id']!r}: evidence must be a dict with 'rows' and 'values'")
    rows = evidence.get("rows") or []
    values = evidence.get("values") or {}
    if not isinstance(rows, (list, tuple)) or not isinstance(values, dict):
        raise BadResult(f"finding {item['id']!r}: evidence.rows must be a list and evidence.values a dict")
    return {"id": item["id"], "layer": layer, "severity": item["severity"], "message": item["message"].strip().splitlines()[0],
            "evidence": {"rows": [str(r) for r in list(rows)[:MAX_EVIDENCE_ROWS]], "values": jsonable(values)}}


def _check_veto(item: Any, audit_name: str) -> dict:
    if not isinstance(item, dict) or not isinstance(item.get("message"), str):
        raise BadResult("a veto must be a dict with a 'message' string and optional 'evidence'")
    evidence = item.get("evidence") or {}
    if not isinstance(evidence, dict):
        raise BadResult("veto evidence must be a dict")
    return {"audit": str(item.get("audit") or audit_name), "message": item["message"], "evidence": jsonable(evidence)}


def _fail(result: AnalyzerResult, exc: BaseException) -> AnalyzerResult:
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    result.status = "error"
    result.error = str(exc) if isinstance(exc, BadResult) else _describe(exc)
    result.metrics, result.findings, result.vetoes = {}, [], []
    return result


def prepare(f: AnalyzerFile) -> tuple[AnalyzerResult, ModuleType | None]:
    """Import one analyzer and check its declarations; failures land in the result."""
    result = AnalyzerResult(f.name, f.path, audit=f.name.startswith("audit_"))
    start = time.perf_counter()
    module = None
    try:
        module = load_module(f)
        layer = getattr(module, "LAYER", None)
        if layer not in LAYERS:
            raise BadResult(f"module-level LAYER must be one of {', '.join(LAYERS)}, got {layer!r}")
        result.layer = layer
        result.audit = bool(getattr(module, "AUDIT", False))
        result.name = str(getattr(module, "NAME", f.name))
        if not callable(getattr(module, "analyze", None)):
            raise BadResult("no analyze(ctx) function")
    except BaseException as exc:  # noqa: BLE001 - an analyzer must never crash the step
        module = None
        _fail(result, exc)
    result.seconds = time.perf_counter() - start
    return result, module


def check_output(out: Any, result: AnalyzerResult) -> AnalyzerResult:
    """Validate what `analyze(ctx)` returned into `result`; raise BadResult on anything off-contract.

    The orchestrator calls this on every result, including those that crossed the
    channel from a confined analyzer process: what the worker says is never trusted.
    """
    if not isinstance(out, dict):
        raise BadResult(f"analyze(ctx) must return a dict with 'metrics' and 'findings', got {type(out).__name__}")
    unknown = set(out) - {"metrics", "findings", "vetoes", "note"}
    if unknown:
        raise BadResult(f"unknown result keys {sorted(unknown)}; use metrics, findings, vetoes")
    result.metrics = _check_metrics(out.get("metrics") or {}, result)
    findings = out.get("findings") or []
    if not isinstance(findings, list):
        raise BadResult("'findings' must be a list")
    result.findings = [_check_finding(x, result.layer) for x in findings]
    vetoes = out.get("vetoes") or []
    if not isinstance(vetoes, list):
        raise BadResult("'vetoes' must be a list")
    result.vetoes = [_check_veto(v, result.name) for v in vetoes]
    if out.get("note"):
        result.note = str(out["note"])[:500]
    return result


def execute(result: AnalyzerResult, module: ModuleType, ctx) -> AnalyzerResult:
    """Run a prepared analyzer and validate what it returns; failures land in the result."""
    start = time.perf_counter()
    try:
        check_output(module.analyze(ctx), result)
    except BaseException as exc:  # noqa: BLE001 - an analyzer must never crash the step
        _fail(result, exc)
    result.seconds += time.perf_counter() - start
    return result


def run_analyzer(f: AnalyzerFile, ctx) -> AnalyzerResult:
    """Load and run one analyzer; every failure is captured in the result, never raised."""
    result, module = prepare(f)
    return execute(result, module, ctx) if module is not None else result


def split_by_trust(files: list[AnalyzerFile]):
    """(run in this process, run confined, refused): which analyzer files are shipped code.

    Trusted: a built-in, or a workspace file byte for byte the built-in of its
    name. A workspace file replacing a built-in audit is refused (the shipped
    audit runs instead). Everything else is the agent's code.
    """
    from evo.resources import resource_dir

    shipped_dir = resource_dir("analyzers").resolve()
    shipped = {f.name: f for f in discover([shipped_dir])}
    trusted, untrusted, refused = [], [], []
    for f in files:
        original = shipped.get(f.name)
        if f.path.resolve().parent == shipped_dir:
            trusted.append(f)
        elif original is not None and f.path.read_bytes() == original.path.read_bytes():
            trusted.append(AnalyzerFile(f.name, original.path, f.overrides))
        elif original is not None and f.name.startswith("audit_"):
            trusted.append(AnalyzerFile(f.name, original.path, f.overrides))
            refused.append(f)
        else:
            untrusted.append(f)
    return trusted, untrusted, refused


def error_finding(result: AnalyzerResult, shown_path: str) -> dict:
    what = "audit" if result.audit else "analyzer"
    consequence = "; this audit could not clear the version" if result.audit else ""
    return finding(
        "harness.analyzer_error", "warning",
        f"{shown_path}: {what} failed ({result.error}){consequence}; fix or remove the file",
        layer=result.layer or "version", values={"analyzer": result.name, "path": str(result.path), "error": result.error},
    )


def run_all(files: list[AnalyzerFile], ctx) -> list[AnalyzerResult]:
    """Run every analyzer: score, signal, behavior, version in that order, audits last.

    Files that fail to import are reported in place and never run.
    """
    prepared = [prepare(f) for f in files]
    prepared.sort(key=lambda p: (p[0].audit, LAYER_ORDER.get(p[0].layer, -1), p[0].name))
    return [execute(result, module, ctx) if module is not None else result for result, module in prepared]
