"""Score layer: pass@k (unbiased estimator) and pass@1 on the validation set.

pass@k is the chance that at least one of k samples gets full credit,
estimated per task as 1 - C(n-c, k) / C(n, k) (n samples, c full-credit) and
averaged over tasks. k is the smallest sample count of any task.

Findings:
- score.pass_gap (info): pass@k exceeds pass@1 by at least PASS_GAP_INFO — the
  policy can solve many tasks it does not solve reliably (headroom for RL).
"""

from evo.harness import kit, stats

LAYER = "score"
PASS_GAP_INFO = 0.3


def analyze(ctx):
    table = ctx.eval
    if table is None or table.num_rows == 0:
        return kit.empty()
    scores = stats.task_scores(table)
    k = int(scores.samples.min())
    per_task = stats.pass_at_k(scores.samples, scores.passes, k)  # (tasks,)
    pass1 = scores.passes / scores.samples  # (tasks,)
    metrics = {"score/pass_at_k": float(per_task.mean()), "score/pass_at_1": float(pass1.mean())}
    for stratum, value in kit.by_stratum(scores.strata, per_task).items():
        metrics[kit.metric_key("score/pass_at_k", stratum)] = value
    findings = []
    gap = metrics["score/pass_at_k"] - metrics["score/pass_at_1"]
    if gap >= PASS_GAP_INFO:
        unreliable = (scores.passes > 0) & (pass1 < 0.5)
        findings.append(kit.finding(
            "score.pass_gap", "info",
            f"pass@{k} {metrics['score/pass_at_k']:.2f} vs pass@1 {metrics['score/pass_at_1']:.2f}: "
            f"{int(unreliable.sum())} tasks are solved sometimes but not reliably",
            rows=kit.rows_where(scores.task_ids, unreliable), values={"gap": gap, "k": k}))
    return {"metrics": metrics, "findings": findings}
