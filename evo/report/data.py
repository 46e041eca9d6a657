"""The report's data model: a workspace's lineage and run artifacts in one JSON-able dict.

One bulk lineage read (`Lineage.read_all()`) plus each version's artifact
folder (metrics.jsonl, eval.json, summary.json, diagnosis.json; eval.parquet
only on the promoted path, where the trend shows an interval). The HTML page,
the PNG plots and the trackers all read this model or the helpers below, so a
number shown in one is the number shown in the others.

Definitions:
- promoted path: the first-parent ancestry of the promoted head, v0 first; the
  checkpoints main's policy was trained through, in order;
- global step: see evo.report.runs;
- Δ vs parent / Δ vs control: from the `judged` event. `headline` is the
  deciding comparison (against `baseline`); a judge that trains a
  counterfactual control also writes `attributed` (against the control) and
  `progress` (against the parent). Both are optional here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from evo.errors import EvoError
from evo.report.layout import edge_points, lay_out
from evo.report.runs import TRAINING_KEYS, global_offsets, read_json, read_metrics, run_steps, training_series

PR_BODIES = 25  # newest versions whose `evo pr` body the page embeds (~5 git processes each)
PATH_BOOTSTRAP_B = 2000  # resamples for the promoted path's Avg@k intervals (judging uses B = 10,000)
DECISIONS = ("promoted", "pruned", "kept", "reverted")
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}

Progress = Callable[[int, int], None]  # (versions done, versions in all)


# ------------------------------------------------------------------ lineage-wide derivations
def promoted_path(records: dict) -> list[str]:
    """First-parent ancestry of the promoted head, oldest first ([] with nothing promoted)."""
    from evo.lineage import Lineage

    head = Lineage.promoted_head(records)
    path, seen = [], set()
    name = head.name if head else None
    while name and name in records and name not in seen:
        seen.add(name)
        path.append(name)
        parents = records[name].parents
        name = parents[0] if parents else None
    return path[::-1]


def interval(headline: dict | None) -> dict | None:
    """The numbers of one comparison: value, delta, its interval, p-value, noise floor."""
    if not isinstance(headline, dict) or headline.get("value") is None:
        return None
    keys = ("metric", "value", "baseline_value", "delta", "ci_low", "ci_high", "p_value", "noise_floor")
    return {k: headline.get(k) for k in keys if headline.get(k) is not None}


def comparisons(judged: dict | None, parents: list[str]) -> dict:
    """{deciding, vs_parent, vs_control} from a `judged` event; absent keys were not measured."""
    if not judged:
        return {}
    attributed = judged.get("attributed") if isinstance(judged.get("attributed"), dict) else None
    progress = judged.get("progress") if isinstance(judged.get("progress"), dict) else None
    out = {"deciding": {"against": judged.get("baseline"), "outcome": judged.get("outcome"),
                        **(interval(judged.get("headline")) or {})}}
    if attributed and attributed.get("headline") == judged.get("headline"):  # the headline is the attributed figure
        out["deciding"]["against"] = attributed.get("against")
        if attributed.get("against") == "control":
            out["deciding"]["control"] = attributed.get("control") or judged.get("control")
    if attributed and interval(attributed.get("headline")):
        against = attributed.get("against")
        entry = {"against": against, "outcome": attributed.get("outcome"), **interval(attributed["headline"])}
        if attributed.get("noise_floor") is not None:
            entry.setdefault("noise_floor", attributed["noise_floor"])
        if against == "control":
            entry["control"] = attributed.get("control") or judged.get("control")
            out["vs_control"] = entry
        else:
            out["vs_parent"] = entry
    if progress and interval(progress.get("headline")) and "vs_parent" not in out:
        out["vs_parent"] = {"against": progress.get("against"), "outcome": progress.get("outcome"),
                            **interval(progress["headline"])}
    baseline = judged.get("baseline")
    if "vs_parent" not in out and (baseline in parents or (not parents and baseline == "base")):
        out["vs_parent"] = dict(out["deciding"])
    return out


# ------------------------------------------------------------------ one version
def _manifest(value) -> dict | None:
    if isinstance(value, dict):
        keep = ("kind", "factor", "change", "hypothesis", "evidence", "predicted_effect", "expected_cost", "skill")
        return {k: value[k] for k in keep if value.get(k) not in (None, "", [], {})}
    if isinstance(value, str) and value:
        return {"kind": "merge" if value.startswith("merge of") else "note", "factor": value}
    return None


def _diagnosis(diag: dict | None) -> dict | None:
    """Findings grouped by layer, worst first; audits and their vetoes (evidence rows left out)."""
    if not diag:
        return None
    by_layer: dict[str, list[dict]] = {}
    for f in diag.get("findings") or []:
        if isinstance(f, dict):
            by_layer.setdefault(str(f.get("layer") or "other"), []).append(
                {"id": f.get("id"), "severity": f.get("severity"), "message": f.get("message")})
    for items in by_layer.values():
        items.sort(key=lambda f: SEVERITY_ORDER.get(f["severity"], 3))
    audits = diag.get("audits") or {}
    broken = [a.get("name") for a in diag.get("analyzers") or [] if isinstance(a, dict) and a.get("status") == "error"]
    return {"harness_version": diag.get("harness_version"), "findings": by_layer,
            "audits": {"vetoed": bool(audits.get("vetoed")), "ran": audits.get("ran") or [],
                       "failed": audits.get("failed") or [],
                       "vetoes": [{"audit": v.get("audit"), "message": v.get("message")}
                                  for v in audits.get("vetoes") or [] if isinstance(v, dict)]},
            "broken_analyzers": broken}


def _backtest(ev: dict | None) -> dict | None:
    if not ev:
        return None
    pred = ev.get("prediction") or {}
    return {"message": ev.get("message"), "change": ev.get("change"),
            "prediction": pred.get("prediction") if isinstance(pred.get("prediction"), dict) else pred,
            "before": pred.get("before"), "after": pred.get("after")}


def _controls(rec) -> list[dict]:
    out = []
    for ev in rec.events:
        if ev["event"] == "control":
            out.append({"key": ev.get("key"), "for": ev.get("for"), "steps": ev.get("steps"), "seed": ev.get("seed"),
                        "avg_at_k": ev.get("avg_at_k"), "per_stratum": ev.get("per_stratum"),
                        "continuation": interval((ev.get("continuation") or {}).get("headline")),
                        "continuation_outcome": (ev.get("continuation") or {}).get("outcome")})
    return out


def version_entry(rec, run_dir: Path, offset: int, metrics: list[dict], summary: dict) -> dict:
    """Everything the page shows about one version (see module docstring for Δ and steps)."""
    from evo.loop.versions import is_confounded

    created = rec.last("created") or {}
    judged = rec.last("judged")
    gated = rec.last("gated") or {}
    evaluated = rec.last("evaluated") or {}
    usage = created.get("usage") or {}
    estimate = gated.get("estimate") or {}
    return {
        "name": rec.name,
        "number": rec.number,
        "parents": list(rec.parents),
        "state": rec.state,
        "commit": rec.commit,
        "created": rec.created,
        "agent": created.get("agent"),
        "intervention": _manifest(created.get("intervention")) or ({"kind": "baseline", "factor": "baseline"}
                                                                   if created and not rec.parents else None),
        "harness_revision": _manifest(created.get("harness_revision")),
        "merge_reason": (rec.last("merged") or {}).get("reason"),
        "outcome": rec.outcome,
        "confounded": is_confounded(rec) if judged else None,
        "comparisons": comparisons(judged, rec.parents),
        "reasons": (judged or {}).get("reasons") or [],
        "vetoes": [{"audit": v.get("audit"), "message": v.get("message")}
                   for v in (judged or {}).get("vetoes") or [] if isinstance(v, dict)],
        "avg_at_k": evaluated.get("avg_at_k"),
        "k": evaluated.get("k"),
        "n_tasks": evaluated.get("n_tasks"),
        "per_stratum": evaluated.get("per_stratum") or {},
        "backtest": _backtest(rec.last("backtested")),
        "gate": {"status": gated.get("status"), "threshold": gated.get("threshold"), "estimate": estimate} if gated else None,
        "reviews": [{"event": e["event"], "reason": e.get("reason"), "by": e.get("by")}
                    for e in rec.events if e["event"] in ("approved", "rejected")],
        "decisions": [{"event": e["event"], "reason": e.get("reason"), "time": e.get("time")}
                      for e in rec.events if e["event"] in DECISIONS],
        "skills": [e.get("skill") for e in rec.events if e["event"] == "skill_used"],
        "controls": _controls(rec),
        "diagnosis": _diagnosis(read_json(run_dir / "diagnosis.json")),
        "cost": {"gpu_hours_estimated": estimate.get("gpu_hours"),
                 "tokens_generated": summary.get("tokens_generated"), "tokens_trained": summary.get("tokens_trained"),
                 "train_wall_s": summary.get("wall_s"),
                 "agent_tokens": int(usage.get("input_tokens", 0) or 0) + int(usage.get("output_tokens", 0) or 0),
                 "agent_cost_usd": float(usage.get("cost_usd", 0.0) or 0.0)},
        "training": {"steps": len(metrics), "global_offset": offset, "series": training_series(metrics, offset)},
        "pr_body": None,
    }


# ------------------------------------------------------------------ workspace-wide sections
def path_trend(root: Path, settings: dict, path: list[str], versions: dict[str, dict]) -> list[dict]:
    """Avg@k along the promoted path (the base model first, when evaluated) with stratified 95% intervals."""
    from evo.settings import artifact_dir

    points = []
    for name in (["base"] if (artifact_dir(root, settings, "base") / "eval.json").exists() else []) + path:
        run_dir = artifact_dir(root, settings, name)
        ev = versions[name] if name in versions else read_json(run_dir / "eval.json") or {}
        point = {"version": name, "avg_at_k": ev.get("avg_at_k"), "per_stratum": {}}
        point.update(_bootstrap_interval(run_dir / "eval.parquet"))
        if not point["per_stratum"]:
            point["per_stratum"] = {s: {"value": v} for s, v in (ev.get("per_stratum") or {}).items() if v is not None}
        if point["avg_at_k"] is not None:
            points.append(point)
    return points


def _bootstrap_interval(eval_parquet: Path) -> dict:
    """{ci_low, ci_high, per_stratum} of Avg@k over tasks: the harness's stratified bootstrap against 0."""
    if not eval_parquet.exists():
        return {}
    import numpy as np
    import pyarrow.parquet as pq

    from evo.harness.stats import avg_at_k_by_stratum, paired_bootstrap, task_scores

    try:
        scores = task_scores(pq.read_table(eval_parquet, columns=["task_id", "stratum", "score"]))
    except (EvoError, OSError, ValueError, KeyError):
        return {}
    if not scores.n_tasks:
        return {}
    boot = paired_bootstrap(scores.mean, np.zeros_like(scores.mean), scores.strata, B=PATH_BOOTSTRAP_B, seed=0)
    values = avg_at_k_by_stratum(scores)
    return {"avg_at_k": scores.avg_at_k, "ci_low": boot["ci_low"], "ci_high": boot["ci_high"],
            "per_stratum": {s: {"value": values[s], "ci_low": b["ci_low"], "ci_high": b["ci_high"]}
                            for s, b in boot["per_stratum"].items()}}


def skill_usage(versions: list[dict]) -> list[dict]:
    """Per skill: where it was used, and wins (improvement) / losses (regression or vetoed) / neither."""
    out: dict[str, dict] = {}
    for v in versions:
        for skill in v["skills"]:
            entry = out.setdefault(skill, {"skill": skill, "uses": 0, "wins": 0, "losses": 0, "open": 0, "versions": []})
            entry["uses"] += 1
            verdict = ("loss" if v["outcome"] == "regression" or v["vetoes"] else
                       "win" if v["outcome"] == "improvement" else "open")
            entry[{"win": "wins", "loss": "losses", "open": "open"}[verdict]] += 1
            entry["versions"].append({"version": v["name"], "outcome": v["outcome"], "state": v["state"], "verdict": verdict})
    return sorted(out.values(), key=lambda e: (-e["uses"], e["skill"]))


def totals(records: dict, versions: list[dict]) -> dict:
    """GPU-hours estimated (at the gate) and charged (what budgets count), measured wall time, agent use."""
    from evo.loop.gate import spent

    used = spent(records)
    wall = sum(v["cost"]["train_wall_s"] or 0.0 for v in versions)
    return {"versions": len(versions),
            "states": _count(v["state"] for v in versions),
            "outcomes": _count(v["outcome"] or "not judged" for v in versions),
            "gpu_hours_estimated": sum(v["cost"]["gpu_hours_estimated"] or 0.0 for v in versions),
            "gpu_hours_charged": used["gpu_hours"],
            "train_wall_hours": wall / 3600.0,
            "tokens_generated": sum(v["cost"]["tokens_generated"] or 0 for v in versions),
            "tokens_trained": sum(v["cost"]["tokens_trained"] or 0 for v in versions),
            "agent_tokens": used["agent_tokens"],
            "agent_cost_usd": used["agent_cost_usd"],
            "agent_steps": used["steps"]}


def _count(values) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def negative_evidence(root: Path) -> dict:
    """The refuted interventions the agent is shown (memory/negative_evidence.jsonl on main)."""
    from evo.agent.memory import Memory

    try:
        return {"entries": Memory.load(root).negative, "error": None}
    except EvoError as exc:
        return {"entries": [], "error": str(exc)}


class _RecordsSnapshot:
    """A Lineage whose `read_all` returns records already read, so `pr_body` costs no extra bulk read."""

    def __init__(self, lineage, records):
        self._lineage, self._records = lineage, records

    def read_all(self):
        return self._records

    def diff(self, a, b):
        from evo.lineage import compare

        return compare.diff(self, a, b)

    def __getattr__(self, name):
        return getattr(self._lineage, name)


def attach_pr_bodies(lineage, root: Path, settings: dict, records: dict, versions: list[dict], limit: int) -> None:
    """The `evo pr` body of the `limit` newest versions (a body costs git processes; older ones say how to get it)."""
    from evo.loop.pr import pr_body

    snapshot = _RecordsSnapshot(lineage, records)
    for v in sorted(versions, key=lambda v: -v["number"])[:limit]:
        try:
            v["pr_body"] = pr_body(snapshot, root, settings, v["name"])["body"]
        except EvoError as exc:
            v["pr_body"] = f"(`evo pr {v['name']}` failed: {exc})"


# ------------------------------------------------------------------ the whole model
def gather(root, settings: dict | None = None, *, lineage=None, progress: Progress | None = None,
           pr_bodies: int = PR_BODIES) -> dict:
    """The report model of the workspace at `root` (see the module docstring)."""
    from evo.lineage import Lineage
    from evo.settings import artifact_dir, load_settings

    lineage = lineage or Lineage.open(root)
    root = lineage.root
    settings = settings or load_settings(root)
    records = lineage.read_all()
    names = sorted(records, key=lambda n: records[n].number)
    run_dirs = {name: artifact_dir(root, settings, name) for name in names}
    metrics, summaries, steps = {}, {}, {}
    for i, name in enumerate(names):
        metrics[name] = read_metrics(run_dirs[name])
        summaries[name] = read_json(run_dirs[name] / "summary.json") or {}
        steps[name] = run_steps(run_dirs[name], metrics[name], summaries[name])
        if progress:
            progress(i + 1, 2 * len(names))
    offsets = global_offsets(records, steps)
    versions = []
    for i, name in enumerate(names):
        versions.append(version_entry(records[name], run_dirs[name], offsets[name], metrics[name], summaries[name]))
        if progress:
            progress(len(names) + i + 1, 2 * len(names))
    path = promoted_path(records)
    on_path = set(path)
    positions = lay_out([(v["name"], v["parents"]) for v in versions], path)
    by_name = {v["name"]: v for v in versions}
    for v in versions:
        v["x"], v["lane"] = positions[v["name"]]
        v["on_path"] = v["name"] in on_path
    edges = [{"from": p, "to": v["name"], "kind": "parent" if i == 0 else "merge",
              "on_path": i == 0 and v["on_path"] and p in on_path,
              "points": edge_points(positions[p], positions[v["name"]], "parent" if i == 0 else "merge")}
             for v in versions for i, p in enumerate(v["parents"]) if p in by_name]
    if pr_bodies:
        attach_pr_bodies(lineage, root, settings, records, versions, pr_bodies)
    return {
        "workspace": {"name": root.name, "root": str(root), "domain": settings.get("domain"),
                      "model": settings.get("model"), "headline": settings.get("search", {}).get("headline"),
                      "generated": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                      "pr_bodies": pr_bodies},
        "versions": versions,
        "edges": edges,
        "promoted_path": path,
        "path_trend": path_trend(root, settings, path, by_name),
        "training_keys": list(TRAINING_KEYS),
        "skills": skill_usage(versions),
        "negative_evidence": negative_evidence(root),
        "totals": totals(records, versions),
    }
