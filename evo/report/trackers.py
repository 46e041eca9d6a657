"""Experiment trackers: a version's run into W&B, TensorBoard or Trackio.

What one run logs, in every configured tracker (`evo.yaml` `logging:`):
- every training step's namespaced metrics from metrics.jsonl, at its global
  step (evo.report.runs), so a version's curve continues its parent's;
- a table of sampled completions per step from rollouts.parquet (like TRL's
  `log_completions`): prompt, completion, reward, advantage, filter decision;
- the evaluation (eval.json) as `eval/...` scalars at the run's last step;
- one summary carrying the version's lineage fields (parent, intervention,
  outcome, Δ and interval vs parent and vs control), and the run is grouped by
  workspace, so versions compare in the tracker's own UI.

The loop calls `log_version` after a version is judged; `log_run` logs a plain
run folder (`evo train --out DIR`). Tracker packages are optional extras,
imported only here and only when configured; a missing one is a one-line
MissingDependencyError naming the extra. Their console output is swallowed so
`--json` output stays machine-readable.
"""

from __future__ import annotations

import contextlib
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from evo.errors import ConfigError, MissingDependencyError
from evo.report.runs import read_json, read_metrics, version_offset

BACKENDS = ("wandb", "tensorboard", "trackio")
COMPLETION_COLUMNS = ("step", "group", "sample", "task_id", "stratum", "prompt", "completion", "reward", "advantage",
                      "kept", "filter_reason", "finish_reason")


@dataclass
class RunLog:
    """Everything one tracker run receives, already read from the run folder."""

    name: str
    group: str
    fields: dict
    steps: list[tuple[int, dict]] = field(default_factory=list)  # (global step, numeric metrics)
    completions: dict[int, list[list]] = field(default_factory=dict)  # global step -> rows of COMPLETION_COLUMNS
    eval: dict = field(default_factory=dict)  # flat eval/... scalars
    last_step: int = 0


# ------------------------------------------------------------------ configuration
def configured(logging: dict | None) -> dict[str, dict]:
    """backend -> its settings with schema defaults, for each backend `logging:` turns on."""
    from evo.recipe import fill_defaults
    from evo.schemas import load_schema

    logging = logging or {}
    props = load_schema("settings")["properties"]["logging"]["properties"]
    out = {}
    for name in BACKENDS:
        conf = logging.get(name)
        if conf is not None:
            out[name] = fill_defaults(dict(conf), {**props[name], "type": "object"})
    return out


def completions_per_step(logging: dict | None) -> int:
    return int((logging or {}).get("completions_per_step", 4))


# ------------------------------------------------------------------ reading a run
def _numeric(row: dict) -> dict:
    return {k: float(v) for k, v in row.items() if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(float(v))}


def sample_completions(run_dir: Path, per_step: int, offset: int) -> dict[int, list[list]]:
    """Up to `per_step` rollouts per training step, spread evenly over its groups (deterministic)."""
    path = Path(run_dir) / "rollouts.parquet"
    if per_step <= 0 or not path.exists():
        return {}
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    columns = [c for c in COMPLETION_COLUMNS if c in schema.names]
    table = pq.read_table(path, columns=columns).to_pylist()
    by_step: dict[int, list[dict]] = {}
    for row in table:
        by_step.setdefault(int(row["step"]), []).append(row)
    out = {}
    for step, rows in by_step.items():
        rows.sort(key=lambda r: (r.get("group", 0), r.get("sample", 0)))
        n = min(per_step, len(rows))
        picks = [rows[round(i * (len(rows) - 1) / max(n - 1, 1))] for i in range(n)]
        out[offset + step] = [[offset + step if c == "step" else r.get(c) for c in COMPLETION_COLUMNS] for r in picks]
    return out


def flat_eval(ev: dict | None) -> dict:
    if not ev:
        return {}
    out = {f"eval/{k}": float(ev[k]) for k in ("avg_at_k", "pass_at_k", "k", "n_tasks", "truncated_frac")
           if isinstance(ev.get(k), (int, float))}
    out.update({f"eval/per_stratum/{s}": float(v) for s, v in (ev.get("per_stratum") or {}).items() if v is not None})
    return out


def read_run(run_dir: Path, *, name: str, group: str, fields: dict, offset: int = 0, per_step: int = 4) -> RunLog:
    """A run folder's metrics, sampled completions and eval, at global steps starting at `offset`."""
    rows = read_metrics(run_dir)
    steps = [(offset + r["step"], _numeric(r)) for r in rows]
    last = steps[-1][0] if steps else offset
    return RunLog(name=name, group=group, fields=fields, steps=steps,
                  completions=sample_completions(run_dir, per_step, offset),
                  eval=flat_eval(read_json(Path(run_dir) / "eval.json")), last_step=last)


def version_fields(records: dict, version: str, workspace: str) -> dict:
    """The lineage fields of one version as flat scalars (None dropped): what its tracker summary carries."""
    from evo.loop.versions import is_confounded
    from evo.report.data import comparisons

    rec = records[version]
    created = rec.last("created") or {}
    iv = created.get("intervention")
    iv = iv if isinstance(iv, dict) else {"factor": iv} if iv else {}
    judged = rec.last("judged")
    decision = next((e for e in reversed(rec.events) if e["event"] in ("promoted", "pruned", "kept", "reverted")), None)
    out = {"workspace": workspace, "version": version, "parent": rec.parents[0] if rec.parents else None,
           "parents": "+".join(rec.parents) or None, "state": rec.state,
           "intervention/kind": iv.get("kind"), "intervention/factor": iv.get("factor"),
           "intervention/change": iv.get("change"), "intervention/skill": iv.get("skill"),
           "outcome": rec.outcome, "baseline": (judged or {}).get("baseline"),
           "confounded": is_confounded(rec) if judged else None, "decision": decision["event"] if decision else None}
    for key, comp in comparisons(judged, rec.parents).items():
        for k in ("delta", "ci_low", "ci_high", "p_value", "value"):
            if comp.get(k) is not None:
                out[f"{key}/{k}"] = comp[k]
    return {k: v for k, v in out.items() if v is not None}


# ------------------------------------------------------------------ public API
def log_version(root, settings: dict, version: str, run_dir=None, fields: dict | None = None, *,
                records: dict | None = None, progress: Callable[[int, int], None] | None = None) -> dict[str, str]:
    """Log one judged version to every tracker `settings["logging"]` configures; returns {backend: where}.

    `run_dir` defaults to the version's artifact folder; `fields` are extra or
    overriding summary fields (e.g. the decision, when called before it is
    recorded); `records` saves a lineage read when the caller has one.
    Does nothing (returns {}) when no tracker is configured.
    """
    from evo.settings import artifact_dir

    backends = configured(settings.get("logging"))
    if not backends:
        return {}
    root = Path(root)
    if records is None:
        from evo.lineage import Lineage

        records = Lineage.open(root).read_all()
    run_dir = Path(run_dir) if run_dir else artifact_dir(root, settings, version)
    workspace = root.resolve().name
    run = read_run(run_dir, name=version, group=workspace,
                   fields={**version_fields(records, version, workspace), **(fields or {})},
                   offset=version_offset(root, settings, records, version),
                   per_step=completions_per_step(settings.get("logging")))
    return _log(run, backends, base=root, default_dirs={"wandb": root / ".evo", "tensorboard": root / ".evo" / "tensorboard"},
                progress=progress)


def log_run(run_dir, logging: dict, *, name: str | None = None, group: str | None = None, fields: dict | None = None,
            progress: Callable[[int, int], None] | None = None) -> dict[str, str]:
    """Log a plain run folder (e.g. `evo train --out DIR`) with a `logging:`-shaped dict; returns {backend: where}."""
    run_dir = Path(run_dir)
    backends = configured(logging)
    if not backends:
        raise ConfigError("no tracker configured; set logging.wandb, logging.tensorboard or logging.trackio "
                          "(e.g. `--to tensorboard`)")
    name = name or run_dir.resolve().name
    summary = read_json(run_dir / "summary.json") or {}
    run = read_run(run_dir, name=name, group=group or "evo-train",
                   fields={"run": name, "model": summary.get("model"), "recipe_hash": summary.get("recipe_hash"),
                           **(fields or {})}, per_step=completions_per_step(logging))
    run.fields = {k: v for k, v in run.fields.items() if v is not None}
    return _log(run, backends, base=Path.cwd(), default_dirs={"wandb": run_dir, "tensorboard": run_dir / "tensorboard"},
                progress=progress)


def _log(run: RunLog, backends: dict, *, base: Path, default_dirs: dict, progress) -> dict[str, str]:
    writers = {"wandb": _to_wandb, "tensorboard": _to_tensorboard, "trackio": _to_trackio}
    out = {}
    for i, (name, conf) in enumerate(backends.items()):
        where = conf.get("dir") or conf.get("log_dir")  # relative to the workspace (a version) or the cwd (a run folder)
        target = (Path(where) if Path(where).is_absolute() else base / where) if where else default_dirs.get(name)
        with contextlib.redirect_stdout(io.StringIO()):  # trackers print banners; library code does not print
            out[name] = writers[name](run, conf, target)
        if progress:
            progress(i + 1, len(backends))
    return out


# ------------------------------------------------------------------ backends
def _import(module: str, package: str, purpose: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(package, package, purpose) from None


def _payloads(run: RunLog, table_cls):
    """(step, what to log there) in step order: the metrics with that step's completions table, then the eval."""
    for step, metrics in run.steps:
        payload = dict(metrics)
        if step in run.completions:
            payload["completions"] = table_cls(columns=list(COMPLETION_COLUMNS), data=run.completions[step])
        yield step, payload
    if run.eval:
        yield run.last_step, dict(run.eval)


def _to_wandb(run: RunLog, conf: dict, target: Path) -> str:
    wandb = _import("wandb", "wandb", "logging.wandb")
    target.mkdir(parents=True, exist_ok=True)
    settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, save_code=False)
    wb = wandb.init(project=conf.get("project") or run.group, entity=conf.get("entity"), mode=conf["mode"],
                    dir=str(target), name=run.name, group=run.group, job_type="version" if "version" in run.fields else "train",
                    tags=[t for t in (run.fields.get("state"), run.fields.get("outcome")) if t], config=run.fields,
                    settings=settings, reinit="create_new")
    try:
        for step, payload in _payloads(run, wandb.Table):
            wb.log(payload, step=step)
        wb.summary.update({**run.fields, **run.eval})
        return str(Path(wb.dir).parent)
    finally:
        wb.finish()


def _to_tensorboard(run: RunLog, conf: dict, target: Path) -> str:
    _import("tensorboard", "tensorboard", "logging.tensorboard")
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    folder = target / run.group / run.name
    for old in folder.glob("events.out.tfevents.*"):  # re-logging a version replaces its run, never doubles it
        old.unlink()
    writer = SummaryWriter(log_dir=str(folder))
    try:
        for step, metrics in run.steps:
            for key, value in metrics.items():
                writer.add_scalar(key, value, global_step=step)
            if step in run.completions:
                writer.add_text("completions", _markdown_table(run.completions[step]), global_step=step)
        for key, value in run.eval.items():
            writer.add_scalar(key, value, global_step=run.last_step)
        scalars = {k: v for k, v in run.fields.items() if isinstance(v, (int, float, str, bool))}
        numbers = {k: float(v) for k, v in scalars.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for key, value in numbers.items():
            writer.add_scalar(f"lineage/{key}", value, global_step=run.last_step)
        exp, ssi, sei = hparams({k: v for k, v in scalars.items() if k not in numbers},
                                {f"lineage/{k}": v for k, v in numbers.items()} or {"eval/avg_at_k": run.eval.get("eval/avg_at_k", 0.0)})
        for summary in (exp, ssi, sei):
            writer.file_writer.add_summary(summary)
        writer.add_text("lineage", _markdown_table([[k, v] for k, v in run.fields.items()], ("field", "value")),
                        global_step=run.last_step)
    finally:
        writer.close()
    return str(folder)


def _to_trackio(run: RunLog, conf: dict, target: Path | None) -> str:
    trackio = _import("trackio", "trackio", "logging.trackio")
    project = conf.get("project") or run.group
    trackio.init(project=project, name=run.name, group=run.group, config=run.fields, embed=False)
    try:
        for step, payload in _payloads(run, trackio.Table):
            trackio.log(payload, step=step)
    finally:
        trackio.finish()
    return f"trackio project {project}"


def _markdown_table(rows: list[list], columns=COMPLETION_COLUMNS) -> str:
    def cell(v) -> str:
        text = f"{v:.4g}" if isinstance(v, float) else str(v)
        return text.replace("|", "\\|").replace("\n", " ")[:300]

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
