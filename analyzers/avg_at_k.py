"""Score layer: Avg@k per task and per stratum on the validation set (eval.parquet).

Avg@k of a task is the mean score of its k samples; the headline is the mean
over tasks (so each stratum weighs by its task count). Also reports how many
tasks are never / always solved: both ends carry no comparative signal.

Findings:
- score.no_eval (warning): the run has no eval.parquet, so nothing can be judged.
- score.uneven_samples (warning): tasks have different sample counts (k), which
  biases Avg@k towards tasks with fewer samples; cites the short tasks.
- score.unsolved_tasks (info): at least UNSOLVED_INFO of tasks score 0 in every sample.
- score.saturated (info): at least SATURATED_INFO of tasks are solved in every sample.
"""

from evo.harness import kit, stats

LAYER = "score"
UNSOLVED_INFO = 0.5
SATURATED_INFO = 0.9


def analyze(ctx):
    table = ctx.eval
    if table is None or table.num_rows == 0:
        return {"metrics": {}, "findings": [kit.finding("score.no_eval", "warning", "no eval.parquet in this run; the score layer is empty and the version cannot be judged")]}
    scores = stats.task_scores(table)
    metrics = {
        "score/avg_at_k": scores.avg_at_k,
        "score/n_tasks": scores.n_tasks,
        "score/k": int(scores.samples.min()),
    }
    for stratum, value in stats.avg_at_k_by_stratum(scores).items():
        metrics[kit.metric_key("score/avg_at_k", stratum)] = value
    unsolved = scores.mean <= 0.0
    solved = scores.mean >= stats.PASS_SCORE
    metrics["score/unsolved_task_frac"] = kit.frac(unsolved)
    metrics["score/solved_task_frac"] = kit.frac(solved)

    findings = []
    if scores.samples.min() != scores.samples.max():
        short = scores.samples < scores.samples.max()
        findings.append(kit.finding(
            "score.uneven_samples", "warning",
            f"{int(short.sum())} of {scores.n_tasks} tasks have fewer than {int(scores.samples.max())} samples "
            f"(min {int(scores.samples.min())}); Avg@k mixes sample sizes, re-run evaluation",
            rows=kit.rows_where(scores.task_ids, short), values={"min_k": int(scores.samples.min()), "max_k": int(scores.samples.max())}))
    if metrics["score/unsolved_task_frac"] >= UNSOLVED_INFO:
        findings.append(kit.finding(
            "score.unsolved_tasks", "info",
            f"{metrics['score/unsolved_task_frac']:.0%} of validation tasks are never solved in {metrics['score/k']} samples",
            rows=kit.rows_where(scores.task_ids, unsolved), values={"unsolved_task_frac": metrics["score/unsolved_task_frac"]}))
    if metrics["score/solved_task_frac"] >= SATURATED_INFO:
        findings.append(kit.finding(
            "score.saturated", "info",
            f"{metrics['score/solved_task_frac']:.0%} of validation tasks are solved in every sample; comparisons lose power",
            rows=kit.rows_where(scores.task_ids, solved), values={"solved_task_frac": metrics["score/solved_task_frac"]}))
    return {"metrics": metrics, "findings": findings}
