"""Paired comparison of two evaluated runs: bootstrap interval, Wilcoxon, outcome class.

`compare_runs(child, parent)` is what the loop's judge phase and `evo compare`
call; `paired_comparison` is the statistics part alone, which the `version`
layer analyzer uses against the parent and the promoted head.
"""

from __future__ import annotations

from pathlib import Path

from evo.errors import HarnessError
from evo.harness import stats
from evo.harness.context import RunArtifacts
from evo.harness.outcome import classify, new_critical_findings

HEADLINE = "score/avg_at_k"


def paired_comparison(child_eval, parent_eval, *, B: int = stats.DEFAULT_B, seed: int = 0) -> dict:
    """Paired Avg@k statistics of two eval.parquet tables over their common tasks."""
    child = stats.task_scores(child_eval)
    parent = stats.task_scores(parent_eval)
    paired = stats.pair(child, parent)
    if len(paired.task_ids) == 0:
        raise HarnessError("compare: the two evaluations share no task_id; evaluate both on the same validation split")
    boot = stats.paired_bootstrap(paired.child, paired.parent, paired.strata, B=B, seed=seed)
    for s, r in boot["per_stratum"].items():
        in_s = paired.strata == s
        r["value"] = float(paired.child[in_s].mean())
        r["baseline_value"] = float(paired.parent[in_s].mean())
    return {
        "metric": HEADLINE,
        "value": float(paired.child.mean()),
        "baseline_value": float(paired.parent.mean()),
        "delta": boot["delta"],
        "ci_low": boot["ci_low"],
        "ci_high": boot["ci_high"],
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


def compare_runs(child_dir: str | Path, parent_dir: str | Path, *, B: int = stats.DEFAULT_B, seed: int = 0,
                 child_diag: dict | None = None, parent_diag: dict | None = None) -> dict:
    """Compare a candidate run with its baseline and classify the outcome.

    Returns {outcome, metric, value, baseline_value, delta, ci_low, ci_high, p_value,
    n_tasks, k, per_stratum: {s: {...}}, reasons: [...], new_critical: [...]}.
    Diagnoses default to each folder's diagnosis.json when present; they supply the
    "critical finding the baseline did not have" rule.
    """
    child, parent = RunArtifacts(child_dir), RunArtifacts(parent_dir)
    result = paired_comparison(_eval_of(child, "candidate"), _eval_of(parent, "baseline"), B=B, seed=seed)
    child_diag = child_diag if child_diag is not None else child.diagnosis
    parent_diag = parent_diag if parent_diag is not None else parent.diagnosis
    new_critical = new_critical_findings(child_diag, parent_diag)
    outcome, reasons = classify(result, k=result["k"], new_critical=new_critical)
    if child_diag is None:
        reasons.append("candidate has no diagnosis; behavior layer not consulted")
    if result["unpaired_tasks"]:
        reasons.append(f"{result['unpaired_tasks']} tasks evaluated in only one run were left out")
    return {"outcome": outcome, **result, "reasons": reasons, "new_critical": new_critical,
            "child": str(child.run_dir), "parent": str(parent.run_dir)}
