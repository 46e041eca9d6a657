"""The judge: two paired comparisons per version and the one that decides.

- **attributed** — the intervention's own effect: the candidate against its
  counterfactual control (the parent's recipe continued under the same
  schedule and seeds). Its outcome class is the version's outcome: no
  intervention is called `improvement` unless it beats the control.
- **progress** — the candidate against its parent's checkpoint: is the new
  version better than its parent (where it started, except for a repair or
  the child of a harmed policy, which trains from an older one:
  `evo.loop.training.repair_start`)?

Where there is no control the two coincide: a continue-training version (its
counterfactual is stopping, i.e. the parent), a harness-only revision (no
training at all), the baseline v0 (against the untrained base model), and
`search.control: none`, which keeps the old behaviour and marks the verdict
`confounded` (the attributed figure includes the gain of the extra steps).

Both intervals carry the training-seed noise the workspace has measured
(`evo.loop.runs.workspace_noise`): a candidate's score is a draw of its recipe
under `train_seeds` seeds, a control's likewise, the parent's checkpoint is a
fixed model. Statistics and outcome classes run here, in the orchestrator,
from the shipped code only.
"""

from __future__ import annotations

from pathlib import Path

from evo.harness import stats
from evo.harness.compare import compare_runs
from evo.loop import runs as R
from evo.loop import versions as V
from evo.loop.runs import Plan
from evo.settings import artifact_dir
from evo.vocabulary import event_id

SCHEMA = 2  # judged events with `attributed` / `progress`; schema 1 events carry one comparison with the parent
HEADLINE_KEYS = ("metric", "value", "baseline_value", "delta", "ci_low", "ci_high", "p_value", "noise_floor",
                 "boot_ci_low", "boot_ci_high")  # boot_*: the task-sampling-only interval, before the seed term


def headline_of(cmp: dict) -> dict:
    return {k: cmp.get(k) for k in HEADLINE_KEYS}


def _figure(against: str, cmp: dict, **extra) -> dict:
    return {"against": against, "outcome": cmp["outcome"], "headline": headline_of(cmp),
            "reasons": cmp.get("reasons", []), **extra}


def judge_runs(version: str, candidate_runs: list[Path], parent_run: Path, *, baseline: str,
               control_runs: list[Path] | None, control_key: str | None, confounded: bool,
               noise: stats.SeedNoise | None, diagnosis: dict, B: int, paired: bool) -> dict:
    """The `judged` event of `version` (without id/time), from its runs and its baselines' runs.

    `candidate_runs`: the version's run folders (one per training seed, its own first).
    `parent_run`: the parent's own run (a fixed checkpoint). `control_runs`: the
    control's runs under the same seeds, or None when the version has no control.
    Against the control, trained under the same seeds from the same checkpoint,
    the comparison is seed-paired (`compare_runs(paired=True)`): from
    `stats.PAIRED_MIN_SEEDS` common seeds on, its seed term is the spread of
    the seed-matched differences themselves. `paired`: run i of each list was
    trained under the same seed (the judge checks the seeds recorded).
    """
    progress = compare_runs(candidate_runs, parent_run, B=B, child_diag=diagnosis, noise=noise, parent_seeds=None)
    if control_runs:
        attributed = compare_runs(candidate_runs, control_runs, B=B, child_diag=diagnosis, noise=noise, paired=paired)
        attributed_figure = _figure("control", attributed, control=control_key, noise=attributed["noise"])
    else:
        attributed = progress
        attributed_figure = _figure(baseline, progress, control=None)
    vetoes = (diagnosis.get("audits") or {}).get("vetoes", [])
    return {
        "event": "judged", "version": version, "schema": SCHEMA, "baseline": baseline,
        "outcome": attributed["outcome"], "headline": headline_of(attributed),
        "reasons": attributed.get("reasons", []), "vetoes": vetoes,
        "attributed": attributed_figure, "progress": _figure(baseline, progress),
        "confounded": bool(confounded), "seeds": len(candidate_runs),
        "noise": noise.to_dict() if noise else None,
    }


def split_inherited(vetoes: list[dict], records: dict, parent: str | None) -> tuple[list[dict], list[dict]]:
    """(the version's own vetoes, the collapse vetoes it inherited): a collapse of a kind the parent's policy
    already carried (`V.collapse_vetoes`: on its verdict, or, below a harness-only revision, on the verdict of
    the version that trained it) is not the version's doing.

    The control (the parent carried on) collapsed the same way, so the
    comparison with it is still the intervention's effect. Measured on
    arithmetic sampled at temperature 0.3 (seed 3): every group of v0 agreed on
    one answer, and raising the generation limit gave +0.107 [+0.086, +0.131]
    against the control, yet the dead groups it inherited vetoed it, and the
    pruned version then refuted the change for the whole workspace. An
    inherited collapse is recorded (`inherited_vetoes`) and still makes the
    policy no place to train from (`V.harmed_by_training`); it does not decide.
    """
    def kind(veto: dict):
        return (veto.get("evidence") or {}).get("kind")

    kinds = {kind(v) for v in V.collapse_vetoes(records, parent)} if parent else set()
    kinds.discard(None)  # a veto that names no kind matches nothing
    inherited = [v for v in vetoes if v.get("audit") == V.COLLAPSE_AUDIT and kind(v) in kinds]
    return [v for v in vetoes if v not in inherited], inherited


def continuation_of(parent_runs_fixed: Path, control_runs: list[Path], *, noise: stats.SeedNoise | None,
                    B: int) -> dict:
    """What continuing the parent's own recipe gave: the control against the parent's checkpoint."""
    cmp = compare_runs(control_runs, parent_runs_fixed, B=B, noise=noise, parent_seeds=None)
    return {"outcome": cmp["outcome"], "headline": headline_of(cmp), "reasons": cmp.get("reasons", [])}


def judge(ws, version: str, plan: Plan, parent: str | None, parent_recipe: dict | None) -> dict:
    """The judge phase: diagnose the version, check its evidence, compare, record `diagnosed` + `judged`."""
    diag = ws.diagnose(version, plan.recipe, out_dir=artifact_dir(ws.root, ws.settings, version))
    records = ws.lineage.read_all()
    baseline = parent or V.BASE
    control_runs = None
    key = None
    if plan.control:
        steps = plan.control_steps
        key = R.control_key(steps, plan.seeds[0])
        control_runs = [R.control_dir(ws.root, ws.settings, parent, R.control_key(steps, s)) for s in plan.seeds]
    confounded = plan.kind == "policy" and not plan.control
    candidate_runs = R.run_dirs(ws.root, ws.settings, records[version])
    if plan.kind == "bootstrap":
        candidate_runs = candidate_runs[:len(plan.seeds)]  # calibration replicates measure noise, not v0
    baseline_run = artifact_dir(ws.root, ws.settings, baseline)
    tampered = R.verify_runs(ws.root, ws.settings, records, candidate_runs + [baseline_run] + (control_runs or []))
    if tampered:  # evidence that no longer matches its recorded sha256 is a veto, whatever it says
        diag.setdefault("audits", {}).setdefault("vetoes", []).extend(
            {"audit": "evidence_integrity", "message": line, "evidence": {}} for line in tampered)
    judged = judge_runs(version, candidate_runs, baseline_run,
                        baseline=baseline, control_runs=control_runs, control_key=key, confounded=confounded,
                        noise=R.workspace_noise(records), diagnosis=diag,
                        B=ws.config.search.bootstrap_samples,
                        paired=R.run_seeds(records[version]) == list(plan.seeds))
    judged["vetoes"], inherited = split_inherited(judged["vetoes"], records, parent)
    if inherited:
        judged["inherited_vetoes"] = inherited
    judged["id"] = event_id(version, "judged")
    ws.lineage.append_event(version, {
        "id": event_id(version, "diagnosed"), "event": "diagnosed", "version": version,
        "harness_version": diag.get("harness_version"), "findings": diag["counts"],
        "vetoed": bool(judged["vetoes"]),
    })
    ws.lineage.append_event(version, judged)
    return judged
