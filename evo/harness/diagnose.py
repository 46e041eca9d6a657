"""Run the harness over one run's artifacts and write diagnosis.json + diagnosis.md.

The analyzers in effect are those of each folder in `analyzer_dirs`, in order
(default: the built-ins; a workspace passes the built-ins, then its own
`analyzers/`); a later file with the same name overrides an earlier one.
Analyzer failures are findings, never exceptions; only a missing run folder or
an unreadable artifact stops a diagnosis.

Trust: shipped code runs in this process — the built-in analyzers, and a
workspace's copy of one that is byte for byte the shipped file. Every other
analyzer (a workspace's own, or an edited copy of a built-in) is the agent's
code and runs confined out of process (`evo.harness.isolation`). Audits always
run from the shipped files: a workspace file that replaces a built-in audit is
not run, and the diagnosis says so.
"""

from __future__ import annotations

import json
from pathlib import Path

from evo.domains import with_option_defaults
from evo.errors import HarnessError
from evo.fileio import write_atomic
from evo.harness import digest, isolation, loader
from evo.harness.context import DIAGNOSIS_FILE, AnalyzerContext, RunArtifacts
from evo.resources import resource_dir
from evo.schemas import validate

DIGEST_FILE = "diagnosis.md"


def diagnose(run_dir, *, recipe, parent_run_dir=None, promoted_run_dir=None, analyzer_dirs=None, settings=None,
             changed_paths=(), declared_harness_revision=False, lineage=None, version="", out_dir=None) -> dict:
    """Diagnose the run in `run_dir`; write diagnosis.json and diagnosis.md to `out_dir` (default: `run_dir`).

    `analyzer_dirs`: folders of analyzers in order, a later file overriding an earlier one
    of the same name (default: the built-ins only). `lineage`: the list analyzers see as
    `ctx.lineage` (the loop passes `evo.loop.versions.lineage_summaries`). Returns the diagnosis dict.
    """
    dirs = [resource_dir("analyzers")] if analyzer_dirs is None else list(analyzer_dirs)
    files = loader.discover(dirs)
    if not files:
        raise HarnessError(f"no analyzers found in {', '.join(map(str, dirs)) or 'an empty list of folders'}; "
                           "pass folders holding analyzer .py files")
    ctx = AnalyzerContext(
        run=RunArtifacts(run_dir),
        recipe=with_option_defaults(recipe or {}),  # a turn limit the recipe leaves to the domain still binds
        parent=RunArtifacts(parent_run_dir) if parent_run_dir else None,
        promoted=RunArtifacts(promoted_run_dir) if promoted_run_dir else None,
        lineage=list(lineage or ()),
        settings=settings or {},
        changed_paths=tuple(str(p) for p in changed_paths or ()),
        declared_harness_revision=bool(declared_harness_revision),
        version=version or "",
    )
    trusted, untrusted, refused = loader.split_by_trust(files)
    results = loader.run_all(trusted, ctx)
    if untrusted:
        job = {"run_dir": str(ctx.run_dir), "parent_run_dir": str(parent_run_dir) if parent_run_dir else None,
               "promoted_run_dir": str(promoted_run_dir) if promoted_run_dir else None, "recipe": ctx.recipe,
               "settings": ctx.settings, "lineage": ctx.lineage, "changed_paths": list(ctx.changed_paths),
               "declared_harness_revision": ctx.declared_harness_revision, "version": ctx.version}
        results += isolation.run_isolated(untrusted, job, isolation.Limits.from_settings(settings))
        results.sort(key=lambda r: (r.audit, loader.LAYER_ORDER.get(r.layer, -1), r.name))
    diag = assemble(results, files, ctx, refused=refused)
    validate(diag, "diagnosis", source=DIAGNOSIS_FILE, error_cls=HarnessError)
    out = Path(out_dir) if out_dir is not None else ctx.run_dir
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / DIAGNOSIS_FILE, json.dumps(diag, indent=2) + "\n")
    write_atomic(out / DIGEST_FILE, digest.markdown(diag))
    return diag


def _shown(path: Path) -> str:
    """A path short enough for a one-line message: analyzers/<file> for any analyzer folder."""
    return f"{path.parent.name}/{path.name}"


def assemble(results: list[loader.AnalyzerResult], files: list[loader.AnalyzerFile], ctx: AnalyzerContext,
             refused: list[loader.AnalyzerFile] = ()) -> dict:
    """Merge analyzer results into the diagnosis dict (format: docs/contracts.md)."""
    metrics: dict = {}
    findings: list = [loader.finding(
        "harness.audit_override_refused", "warning",
        f"{_shown(f.path)} replaces the built-in audit {f.name}; audits run from the shipped code, so it was not run",
        layer="version", values={"analyzer": f.name, "path": str(f.path)}) for f in refused]
    vetoes: list = []
    ran, failed = [], []
    for r in results:
        if r.status == "error":
            findings.append(loader.error_finding(r, _shown(r.path)))
            if r.audit:
                failed.append(r.name)
            continue
        clash = sorted(set(metrics) & set(r.metrics))
        if clash:
            r.note = ((r.note + "; ") if r.note else "") + f"overrode metrics also set by an earlier analyzer: {', '.join(clash[:5])}"
        metrics.update(r.metrics)
        findings.extend({**f, "analyzer": r.name} for f in r.findings)
        if r.audit:
            ran.append(r.name)
            vetoes.extend(r.vetoes)
        elif r.vetoes:
            findings.append(loader.finding(
                "harness.veto_ignored", "warning",
                f"{_shown(r.path)}: returned vetoes but is not an audit (set AUDIT = True in an analyzers/audit_*.py file)",
                layer="version", values={"analyzer": r.name, "vetoes": len(r.vetoes)}))
    counts = {s: sum(1 for f in findings if f["severity"] == s) for s in ("critical", "warning", "info")}
    return {
        "version": ctx.version,
        "harness_version": loader.harness_version(files),
        "run_dir": str(ctx.run_dir),
        "metrics": dict(sorted(metrics.items())),
        "counts": counts,
        "findings": digest.sorted_findings({"findings": findings}),
        "analyzers": [r.record() for r in results],
        "audits": {"vetoed": bool(vetoes), "vetoes": vetoes, "ran": sorted(ran), "failed": sorted(failed)},
    }
