"""The training runs behind a verdict: seed replicates, counterfactual controls, the noise floor.

A candidate trains `grpo.steps` more steps from its parent's checkpoint (a
repair, or the child of a collapsed policy, from an older policy's:
`evo.loop.training.repair_start`), so
comparing it with the parent credits it with whatever more training alone
would have given. The **control** answers that: the parent's own recipe,
continued from the parent's checkpoint under the candidate's step and seed
schedule. It is trained once per (parent, schedule) and shared by every sibling;
its runs live in `<artifact root>/controls/<parent>/steps<S>-seed<s>/` and are
recorded by a `control` event on the parent (artifacts hashed like a version's,
and its own comparison with the parent: what continuing alone gave).

**Replicates**: with `search.train_seeds: N`, a version (and its control) is
trained under N seeds, `recipe.seed + i`; the first is the version's own run
(`<artifact root>/vN/`, the checkpoint its children start from), the others
live in `vN/replicates/seed-<s>/` with a `replicated` event each.

**Noise floor**: the spread of Avg@k between runs of one recipe that differ
only in the training seed (`evo.harness.stats.SeedNoise`), pooled over every
replicate set the lineage holds: the bootstrap's calibration replicates of v0
(`search.calibration_seeds`), any version's seed replicates, any control's
seeds. It is read from the recorded Avg@k of those runs, never from files.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from evo.harness import stats
from evo.lineage.fsck_content import sha256_of
from evo.settings import artifact_dir, artifact_root

REPLICATES = "replicates"
CONTROLS = "controls"
RUN_FILES = ("rollouts.parquet", "metrics.jsonl", "summary.json", "eval.parquet", "eval.json")
EVAL_FILES = ("eval.parquet", "eval.json")
JUDGED_FILES = ("eval.parquet", "rollouts.parquet")  # what the judge and the audits read of a run


# ----------------------------------------------------------------- naming
@dataclass
class Plan:
    """What a step trains. `kind`: bootstrap | policy | continue | harness (`StepReport.describe_proposal`)."""

    kind: str
    recipe: dict
    seeds: list[int]
    control: bool = False  # judged against a counterfactual control of the parent
    calibration: list[int] = field(default_factory=list)  # bootstrap: extra seeds of v0 for the noise floor
    control_steps: int | None = None  # the control's schedule; default the candidate's `grpo.steps`
    start: str | None = None  # the policy the version trains from, when not its parent's: an ancestor, or "base"

    def __post_init__(self):
        if self.control_steps is None:
            self.control_steps = int(self.recipe["grpo"]["steps"])

    @property
    def trains(self) -> bool:
        return self.kind in ("bootstrap", "policy")


def seeds_for(recipe: dict, train_seeds: int) -> list[int]:
    """The training seeds a version of `recipe` is trained under: recipe.seed, +1, ... (search.train_seeds of them)."""
    base = int(recipe["seed"])
    return [base + i for i in range(int(train_seeds))]


def with_seed(recipe: dict, seed: int) -> dict:
    out = copy.deepcopy(recipe)
    out["seed"] = int(seed)
    return out


def version_seeds(recipe: dict, manifest: dict, train_seeds: int) -> list[int]:
    """The seeds a version trains (or, for continue-training, measures) under: search.train_seeds, or more
    when its manifest asks for them (`seeds`, a continuation measured again), from the `seed_start`-th on
    (a candidate measured again on fresh seeds)."""
    start = int(manifest.get("seed_start") or 0)
    return seeds_for(recipe, start + max(int(train_seeds), int(manifest.get("seeds") or 0)))[start:]


def run_seeds(rec) -> list[int]:
    """The training seed of each of `run_dirs(rec)`, in that order."""
    return [int((rec.last("trained") or {}).get("seed") or 0)] + sorted(replicate_events(rec))


def replicate_dir(root: Path, settings: dict, version: str, seed: int) -> Path:
    return artifact_dir(root, settings, version) / REPLICATES / f"seed-{seed}"


def control_key(steps: int, seed: int) -> str:
    return f"steps{int(steps)}-seed{int(seed)}"


def control_dir(root: Path, settings: dict, parent: str, key: str) -> Path:
    return artifact_root(root, settings) / CONTROLS / parent / key


def control_steps(parent_recipe: dict, candidate_recipe: dict, manifest: dict) -> int:
    """The control's step schedule: the candidate's, unless the step count is the intervention itself.

    A control holds everything but the intervention fixed. When a candidate
    changes `grpo.steps`, its counterfactual is the parent's recipe under the
    parent's own schedule; otherwise a steps change would be judged against
    itself (the same recipe, the same steps) and always look like nothing.
    A continuation runs the parent's recipe for its manifest's `steps` (default
    the recipe's own): measured again, it may go longer.
    """
    if manifest.get("factor") == "grpo.steps":
        return int(parent_recipe["grpo"]["steps"])
    if manifest.get("kind") == "continue" and manifest.get("steps"):
        return int(manifest["steps"])
    return int(candidate_recipe["grpo"]["steps"])


def trained_by(event: dict, holder: str) -> str:
    """The version whose recipe trained the run of `control` event `event` recorded on `holder`: `holder`, or for
    a shared control the version its `shared_from` run lies under (`control_dir`: CONTROLS/<version>/<key>)."""
    return Path(event["shared_from"]).parts[1] if event.get("shared_from") else holder


def control_recipe(parent_recipe: dict, steps: int, seed: int) -> dict:
    """The parent's recipe under a candidate's schedule: `steps` steps, training seed `seed`."""
    out = with_seed(parent_recipe, seed)
    out["grpo"] = dict(out["grpo"], steps=int(steps))
    return out


def control_events(rec) -> dict[str, dict]:
    """key -> the `control` event recorded on `rec` (a parent's VersionRecord)."""
    return {ev["key"]: ev for ev in rec.events if ev["event"] == "control"} if rec is not None else {}


def replicate_events(rec) -> dict[int, dict]:
    """seed -> the `replicated` event recorded on `rec`."""
    return {int(ev["seed"]): ev for ev in rec.events if ev["event"] == "replicated"} if rec is not None else {}


def run_dirs(root: Path, settings: dict, rec) -> list[Path]:
    """Every evaluated run folder of a version: its own first, then its recorded replicates by seed."""
    runs = [artifact_dir(root, settings, rec.name)]
    for _seed, ev in sorted(replicate_events(rec).items()):
        runs.append(artifact_root(root, settings) / ev["run"])
    return runs


def is_finished(folder: Path) -> bool:
    """A run folder whose training and evaluation both completed (summary.json is written last)."""
    return (folder / "summary.json").is_file() and (folder / "eval.parquet").is_file()


# ----------------------------------------------------------------- artifacts
def artifact_list(folder: Path, names: tuple[str, ...] | None = None) -> list[dict]:
    """URI, size and sha256 of each artifact of one run folder (the checkpoint's weights included).

    Nested run folders (replicates) are their own runs, listed by their own
    events. `names`: only these top-level files.
    """
    out = []
    for path in sorted(Path(folder).rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or path.suffix == ".tmp" or rel.parts[0] == REPLICATES:
            continue
        if names is not None and str(rel) not in names:
            continue
        if rel.parts[0] != "checkpoint" and rel.name not in RUN_FILES:
            continue
        out.append({"name": str(rel), "uri": path.resolve().as_uri(), "size": path.stat().st_size,
                    "sha256": sha256_of(path)})
    return out


def recorded_hashes(records: dict) -> dict[tuple[str, str], str]:
    """(run folder relative to the artifact root, file name) -> the sha256 the lineage recorded for it.

    From every event that hashes a run: a version's `trained` and `evaluated`
    (its own folder; v0's also the base model's evaluation), `replicated` and
    `control` (their `run` folder). A later record of the same file wins (a
    harness revision re-evaluates under a new recipe).
    """
    out: dict[tuple[str, str], str] = {}
    for rec in sorted(records.values(), key=lambda r: r.number):
        for ev in rec.events:
            groups = []
            if ev["event"] in ("trained", "evaluated"):
                groups.append((rec.name, ev.get("artifacts") or []))
                groups.append(("base", ev.get("baseline_artifacts") or []))
            elif ev["event"] in ("replicated", "control"):
                groups.append((ev["run"], ev.get("artifacts") or []))
            for run, artifacts in groups:
                for a in artifacts:
                    if a.get("sha256"):
                        out[(run, a["name"])] = a["sha256"]
    return out


def verify_runs(root: Path, settings: dict, records: dict, folders: list[Path],
                names: tuple[str, ...] | None = JUDGED_FILES) -> list[str]:
    """One line per file the judge reads (`names`: eval.parquet, rollouts.parquet; None: every file the
    lineage recorded for the run, the checkpoint's weights included) whose content no longer matches the
    sha256 recorded in the lineage. Files never recorded (older workspaces) are not reported: there is
    nothing to check them against. With `names=None`, a file in a checkpoint whose files were recorded
    but that was not itself recorded is reported too: a model loads whatever its folder holds (a chat
    template, a config), so an added file changes the model as surely as a changed one."""
    recorded = recorded_hashes(records)
    base = artifact_root(root, settings).resolve()
    problems = []
    for folder in folders:
        try:
            run = str(Path(folder).resolve().relative_to(base))
        except ValueError:
            continue
        mine = sorted(n for r, n in recorded if r == run)
        for name in names if names is not None else mine:
            expected = recorded.get((run, name))
            if expected is None:
                continue
            path = Path(folder) / name
            actual = sha256_of(path) if path.is_file() else None
            if actual != expected:
                what = "is missing" if actual is None else f"has sha256 {actual[:12]}, not the recorded {expected[:12]}"
                problems.append(f"{run}/{name} {what}: the evidence changed after it was recorded (tampering?)")
        if names is None and any(n.startswith("checkpoint/") for n in mine) and (Path(folder) / "checkpoint").is_dir():
            for path in sorted((Path(folder) / "checkpoint").rglob("*")):
                name = str(path.relative_to(folder))
                if path.is_file() and name not in mine:
                    problems.append(f"{run}/{name} was added after the run was recorded: the evidence changed (tampering?)")
    return problems


def clone_run(source: Path, target: Path) -> None:
    """Make `target` hold the finished run in `source` (hard links where the filesystem allows; artifacts never change)."""
    if is_finished(target):
        return
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if rel.parts[0] in (REPLICATES,) or path.suffix == ".tmp":
            continue
        dest = partial / rel
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, dest)
        except OSError:
            shutil.copy2(path, dest)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():  # an unfinished run left by a kill before the clone: the clone replaces it
        shutil.rmtree(target)
    os.replace(partial, target)


def eval_summary(folder: Path) -> dict:
    """The evaluation a finished run recorded (eval.json)."""
    return json.loads((Path(folder) / "eval.json").read_text(encoding="utf-8"))


# ----------------------------------------------------------------- noise
def replicate_sets(records: dict) -> list[list[tuple[float, dict]]]:
    """(Avg@k, per-stratum Avg@k) of runs that differ only by training seed, grouped by recipe and start.

    A version's own run with its seed replicates; the seeds of each control
    schedule of a parent. Sets of one run are returned too (they carry no
    spread; `stats.seed_noise` skips them). Each training counts once: a
    continue-training version's runs are its parent's control runs, a
    control an ancestor already trained (`shared_from`) is that ancestor's run,
    and so is a version's run reused from an earlier version's (`shared_from`),
    so a training met twice stays in the largest set that holds it (counted in
    two sets it would narrow the floor with a spread it measured once).
    """
    trainings = {ev["run"]: ev.get("shared_from") or ev["run"]  # control run folder -> the run that trained it
                 for rec in records.values() for ev in control_events(rec).values()}
    sets: list[list[tuple[str, float, dict]]] = []
    for rec in records.values():
        evaluated = rec.last("evaluated")
        replicas = replicate_events(rec)
        if evaluated and replicas:
            trained = rec.last("trained") or {}
            seed = int(trained.get("seed") or 0)
            own = [(trained.get("shared_from") or _training_of(rec, seed, rec.name, trainings),
                    float(evaluated["avg_at_k"]), evaluated.get("per_stratum") or {})]
            sets.append(own + [(ev.get("shared_from") or _training_of(rec, s, ev["run"], trainings), float(ev["avg_at_k"]),
                                ev.get("per_stratum") or {}) for s, ev in sorted(replicas.items())])
        by_schedule: dict[int, list] = {}
        for ev in control_events(rec).values():
            by_schedule.setdefault(int(ev["steps"]), []).append(
                (trainings[ev["run"]], float(ev["avg_at_k"]), ev.get("per_stratum") or {}))
        sets.extend(by_schedule.values())
    counted: set[str] = set()
    out = []
    for members in sorted(sets, key=len, reverse=True):  # stable: ties keep the lineage's order
        kept = [(value, strata) for training, value, strata in members if training not in counted]
        counted.update(training for training, _, _ in members)
        out.append(kept)
    return out


def _training_of(rec, seed: int, run: str, trainings: dict[str, str]) -> str:
    """The run folder that trained `rec`'s run under `seed`: its own, or (a continuation) its parent's control's."""
    reused = (rec.last("trained") or {}).get("from_control")
    if not reused:
        return run
    steps = int(reused.split("-")[0].removeprefix("steps"))
    folder = f"{CONTROLS}/{rec.parents[0]}/{control_key(steps, seed)}"
    return trainings.get(folder, folder)


def workspace_noise(records: dict) -> stats.SeedNoise | None:
    """The pooled seed-to-seed spread of Avg@k the lineage has measured so far (None: not measured)."""
    return stats.seed_noise(replicate_sets(records))
