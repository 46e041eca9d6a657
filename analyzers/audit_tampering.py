"""Audit: tampering — the version's diff touches protected paths.

Protected globs come from settings `paths.protected` (default: evo.yaml,
data/validation/**, evaluator/**, analyzers/audit_*.py, .github/**); `*` stays
within a folder, `**` crosses folders. A version that changes any of them is
vetoed: it could have moved the goalposts (validation data, the evaluator) or
disarmed an audit.

One exception: a *declared harness revision* (the intervention is on the
harness, `declared_harness_revision` true) may change protected analyzer files
(HARNESS_GLOBS) — but never validation data, the evaluator or settings.
"""

from evo.harness import kit

LAYER = "version"
AUDIT = True
NAME = "tampering"
HARNESS_GLOBS = ("analyzers/**",)


def _protected(ctx):
    configured = ctx.setting("paths.protected")
    if configured is not None:
        return list(configured)
    from evo.schemas import load_schema

    return list(load_schema("settings")["properties"]["paths"]["properties"]["protected"]["default"])


def analyze(ctx):
    protected = _protected(ctx)
    touched = sorted(p for p in ctx.changed_paths if any(kit.glob_match(p, g) for g in protected))
    metrics = {"version/changed_paths": len(ctx.changed_paths), "version/protected_paths_touched": len(touched)}
    if not touched:
        return {"metrics": metrics, "findings": []}
    harness_only = all(any(kit.glob_match(p, g) for g in HARNESS_GLOBS) for p in touched)
    if ctx.declared_harness_revision and harness_only:
        return {"metrics": metrics, "findings": [kit.finding(
            "version.harness_revision", "info",
            f"declared harness revision changes protected analyzers: {', '.join(touched)}",
            rows=touched, values={"paths": touched})]}
    outside = [p for p in touched if not any(kit.glob_match(p, g) for g in HARNESS_GLOBS)]
    if ctx.declared_harness_revision:
        reason = f"a declared harness revision may change analyzers only, but it changes {', '.join(outside)}"
    else:
        reason = f"the version changes protected paths {', '.join(touched)} without being a declared harness revision"
    message = f"tampering: {reason}"
    evidence = {"paths": touched, "protected": protected, "declared_harness_revision": ctx.declared_harness_revision}
    return {"metrics": metrics,
            "findings": [kit.finding("version.tampering", "critical", message, rows=touched, values=evidence)],
            "vetoes": [{"audit": NAME, "message": message, "evidence": evidence}]}
