"""Paired comparison of two evaluated runs: bootstrap interval, Wilcoxon, outcome class.

`compare_runs(child, parent)` is what the loop's judge phase and `evo compare`
call; `paired_comparison` is the statistics part alone, which the `version`
layer analyzer uses against the parent and the promoted head.
"""

from __future__ import annotations

import numpy as np

from evo.errors import HarnessError
from evo.harness import stats
from evo.harness.context import RunArtifacts
from evo.harness.outcome import classify, new_critical_findings

HEADLINE = "score/avg_at_k"


def _scores(evals) -> stats.TaskScores:
    """Per-task Avg@k of one eval table, or of several replicate runs pooled (the mean over all their samples)."""
    if not isinstance(evals, (list, tuple)):
        return stats.task_scores(evals)
    if len(evals) == 1:
        return stats.task_scores(evals[0])
    import pyarrow as pa

    cols = ["task_id", "stratum", "score"]
    tables = [t.select([c for c in cols if c in t.column_names]) for t in evals]
    return stats.task_scores(pa.concat_tables(tables, promote_options="default"))


def paired_comparison(child_eval, parent_eval, *, B: int = stats.DEFAULT_B, seed: int = 0,
                      noise: stats.SeedNoise | None = None, child_seeds: int | None = 1,
                      parent_seeds: int | None = None) -> dict:
    """Paired Avg@k statistics of two evaluations over their common tasks.

    Each side is an eval.parquet table or a list of them (replicate trainings
    under different seeds, pooled per task). With `noise`, the bootstrap
    interval is widened by the training-seed term (`stats.SeedNoise.floor`):
    `child_seeds` / `parent_seeds` say how many seeds stand behind each side's
    score, None for a fixed model (e.g. the checkpoint a candidate started from).
    Strata get Bonferroni-level intervals, so several strata do not multiply the
    chance of a spurious "significantly better/worse". `boot_ci_*` keep the
    task-sampling-only interval.
    """
    child = _scores(child_eval)
    parent = _scores(parent_eval)
    paired = stats.pair(child, parent)
    if len(paired.task_ids) == 0:
        raise HarnessError("compare: the two evaluations share no task_id; evaluate both on the same validation split")
    n_strata = max(1, len(np.unique(paired.strata)))
    stratum_confidence = 1.0 - (1.0 - stats.CONFIDENCE) / n_strata
    boot = stats.paired_bootstrap(paired.child, paired.parent, paired.strata, B=B, seed=seed,
                                  stratum_confidence=stratum_confidence)
    floor = noise.floor(child_seeds, parent_seeds) if noise else 0.0
    ci_low, ci_high = boot["ci_low"], boot["ci_high"]
    if noise:
        ci_low, ci_high = stats.widen(ci_low, ci_high, boot["delta"], noise.se(child_seeds, parent_seeds))
    for s, r in boot["per_stratum"].items():
        in_s = paired.strata == s
        r["value"] = float(paired.child[in_s].mean())
        r["baseline_value"] = float(paired.parent[in_s].mean())
        if noise:
            r["ci_low"], r["ci_high"] = stats.widen(
                r["ci_low"], r["ci_high"], r["delta"], noise.se(child_seeds, parent_seeds, stratum=s),
                confidence=stratum_confidence)
    return {
        "metric": HEADLINE,
        "value": float(paired.child.mean()),
        "baseline_value": float(paired.parent.mean()),
        "delta": boot["delta"],
        "ci_low": ci_low,
        "ci_high": ci_high,
        "boot_ci_low": boot["ci_low"],
        "boot_ci_high": boot["ci_high"],
        "noise_floor": floor if noise else None,
        "seed_sigma": noise.sigma if noise else None,
        "child_seeds": child_seeds,
        "baseline_seeds": parent_seeds,
        "p_value": stats.wilcoxon_p(paired.child, paired.parent),
        "n_tasks": boot["n_tasks"],
        "k": paired.k,
        "B": B,
        "seed": seed,
        "unpaired_tasks": int(child.n_tasks + parent.n_tasks - 2 * len(paired.task_ids)),
        "per_stratum": boot["per_stratum"],
    }


def _eval_of(run: RunArtifacts, role: str):
    table = run.eval
    if table is None:
        raise HarnessError(f"{run.run_dir}: no eval.parquet for the {role}; run `evo eval CHECKPOINT --out <that folder>` first")
    return table


def _runs(dirs) -> list[RunArtifacts]:
    return [RunArtifacts(d) for d in (dirs if isinstance(dirs, (list, tuple)) else [dirs])]


_AS_GIVEN = object()


def compare_runs(child_dir, parent_dir, *, B: int = stats.DEFAULT_B, seed: int = 0,
                 child_diag: dict | None = None, parent_diag: dict | None = None,
                 noise: stats.SeedNoise | None = None, child_seeds=_AS_GIVEN, parent_seeds=_AS_GIVEN,
                 paired: bool = False) -> dict:
    """Compare a candidate run with its baseline and classify the outcome.

    `child_dir` / `parent_dir`: a run folder, or a list of replicate run folders
    of one recipe under different training seeds (the first is the primary, whose
    diagnosis is used). `noise` widens the interval by the seed term; the seed
    counts default to the number of folders given, and `parent_seeds=None` marks
    a fixed model (the checkpoint itself, not a draw of a training recipe).

    `paired`: run i of each side was trained under the same seed from the same
    checkpoint (a candidate and its control). From `stats.PAIRED_MIN_SEEDS`
    such pairs on, the seed term is their differences' own spread
    (`stats.paired_seed_noise`) rather than `noise`.

    Returns {outcome, metric, value, baseline_value, delta, ci_low, ci_high, p_value,
    noise_floor, noise (the seed noise used), n_tasks, k, per_stratum: {s: {...}}, reasons: [...], new_critical: [...]}.
    Diagnoses default to each primary folder's diagnosis.json when present; they supply
    the "critical finding the baseline did not have" rule.
    """
    children, parents = _runs(child_dir), _runs(parent_dir)
    child_evals, parent_evals = [_eval_of(r, "candidate") for r in children], [_eval_of(r, "baseline") for r in parents]
    if paired and len(children) == len(parents) >= stats.PAIRED_MIN_SEEDS:
        noise = stats.paired_seed_noise(zip(map(stats.task_scores, child_evals), map(stats.task_scores, parent_evals))) or noise
    result = paired_comparison(
        child_evals, parent_evals, B=B, seed=seed,
        noise=noise, child_seeds=len(children) if child_seeds is _AS_GIVEN else child_seeds,
        parent_seeds=len(parents) if parent_seeds is _AS_GIVEN else parent_seeds)
    child, parent = children[0], parents[0]
    child_diag = child_diag if child_diag is not None else child.diagnosis
    parent_diag = parent_diag if parent_diag is not None else parent.diagnosis
    new_critical = new_critical_findings(child_diag, parent_diag)
    outcome, reasons = classify(result, k=result["k"], new_critical=new_critical)
    if noise is None:
        reasons.append("noise floor not measured: the interval covers task sampling only, not training-seed luck")
    elif noise.paired:
        reasons.append(f"seed noise floor ±{result['noise_floor']:.4f} (sigma {noise.sigma:.4f} of the differences "
                       f"between the two arms under each of {noise.runs} common seeds)")
    else:
        reasons.append(f"seed noise floor ±{result['noise_floor']:.4f} (sigma {noise.sigma:.4f} from {noise.runs} runs)")
    if child_diag is None:
        reasons.append("candidate has no diagnosis; behavior layer not consulted")
    if result["unpaired_tasks"]:
        reasons.append(f"{result['unpaired_tasks']} tasks evaluated in only one run were left out")
    return {"outcome": outcome, **result, "noise": noise.to_dict() if noise else None, "reasons": reasons,
            "new_critical": new_critical,
            "child": str(child.run_dir), "parent": str(parent.run_dir)}
