"""Statistics for judging versions: Avg@k, pass@k, paired bootstrap, Wilcoxon.

The protocol follows the paper's appendix F: each task contributes one paired
observation, the difference of its Avg@k (mean score over k samples) between
two versions; a 95% interval comes from B = 10,000 task-level bootstrap
resamples with a fixed seed, and a two-sided Wilcoxon signed-rank test gives
the p-value.

The bootstrap is stratified: tasks are resampled within each stratum
(benchmark subset / difficulty level), so every resample keeps the strata's
sizes, and the aggregate weights each stratum by its number of tasks. It is
vectorised as one (B x n) index matrix (in chunks when B x n is large) instead
of a Python loop over B; the chunks draw from the generator in the same order
as a row-by-row loop would, so a loop with the same seed gives identical draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evo.errors import HarnessError

PASS_SCORE = 1.0 - 1e-9  # a sample "passes" (for pass@k) when its score is full credit
DEFAULT_B = 10_000
CONFIDENCE = 0.95
_CHUNK_CELLS = 8_000_000  # B x n cells per chunk: ~64 MB of float64 at most


@dataclass
class TaskScores:
    """Per-task Avg@k of one evaluation."""

    task_ids: np.ndarray  # (tasks,) str, sorted
    strata: np.ndarray  # (tasks,) str
    mean: np.ndarray  # (tasks,) float: Avg@k of the task
    samples: np.ndarray  # (tasks,) int: k actually present for the task
    passes: np.ndarray  # (tasks,) int: samples with full credit

    @property
    def n_tasks(self) -> int:
        return len(self.task_ids)

    @property
    def avg_at_k(self) -> float:
        """Headline Avg@k: the mean over tasks of each task's mean score."""
        return float(self.mean.mean()) if self.n_tasks else float("nan")


def task_scores(eval_table, metric: str = "score") -> TaskScores:
    """Aggregate an eval.parquet table (task x sample rows) into per-task Avg@k."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for column in ("task_id", metric):
        if column not in eval_table.column_names:
            raise HarnessError(f"eval.parquet: column {column!r} is missing; re-run evaluation to write it")
    score = pc.fill_null(eval_table.column(metric), 0.0).cast(pa.float64())
    strata = eval_table.column("stratum") if "stratum" in eval_table.column_names else pa.array(["all"] * eval_table.num_rows)
    table = pa.table({
        "task_id": eval_table.column("task_id"),
        "stratum": strata,
        "score": score,
        "passed": pc.cast(pc.greater_equal(score, PASS_SCORE), pa.int64()),
    })
    agg = table.group_by("task_id", use_threads=False).aggregate(
        [("score", "mean"), ("score", "count"), ("passed", "sum"), ("stratum", "first")]
    ).sort_by("task_id")
    return TaskScores(
        task_ids=agg.column("task_id").to_numpy(zero_copy_only=False).astype(str),
        strata=agg.column("stratum_first").to_numpy(zero_copy_only=False).astype(str),
        mean=agg.column("score_mean").to_numpy(),
        samples=agg.column("score_count").to_numpy().astype(np.int64),
        passes=agg.column("passed_sum").to_numpy().astype(np.int64),
    )


def avg_at_k_by_stratum(scores: TaskScores) -> dict[str, float]:
    labels, inverse = np.unique(scores.strata, return_inverse=True)
    sums = np.bincount(inverse, weights=scores.mean, minlength=len(labels))
    counts = np.bincount(inverse, minlength=len(labels))
    return {str(s): float(v / c) for s, v, c in zip(labels, sums, counts)}


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k per task (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), for k <= n."""
    from scipy.special import gammaln

    n = np.asarray(n, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    if np.any(n < k):
        raise HarnessError(f"pass@{k}: some tasks have only {int(n.min())} samples; use k <= the smallest sample count")
    fail = n - c
    out = np.ones_like(n)
    ok = fail >= k  # otherwise every k-subset contains a pass
    # log[C(n-c, k) / C(n, k)] = lgamma(n-c+1) - lgamma(n-c-k+1) - lgamma(n+1) + lgamma(n-k+1)
    log_ratio = gammaln(fail[ok] + 1) - gammaln(fail[ok] - k + 1) - gammaln(n[ok] + 1) + gammaln(n[ok] - k + 1)
    out[ok] = 1.0 - np.exp(log_ratio)
    return out


@dataclass
class Paired:
    """Two evaluations aligned on their common tasks."""

    task_ids: np.ndarray  # (n,)
    strata: np.ndarray  # (n,)
    child: np.ndarray  # (n,) Avg@k per task
    parent: np.ndarray  # (n,)
    k: int  # smallest number of samples behind any paired task


def pair(child: TaskScores, parent: TaskScores) -> Paired:
    common, ci, pi = np.intersect1d(child.task_ids, parent.task_ids, assume_unique=True, return_indices=True)
    k = int(min(child.samples[ci].min(), parent.samples[pi].min())) if len(common) else 0
    return Paired(common, child.strata[ci], child.mean[ci], parent.mean[pi], k)


def paired_bootstrap(child: np.ndarray, parent: np.ndarray, strata: np.ndarray | None = None, *,
                     B: int = DEFAULT_B, seed: int = 0, confidence: float = CONFIDENCE) -> dict:
    """Stratified paired bootstrap of mean(child - parent) over tasks.

    Returns {"delta", "ci_low", "ci_high", "n_tasks", "B", "seed", "per_stratum": {s: {...}}}.
    """
    d = np.asarray(child, dtype=np.float64) - np.asarray(parent, dtype=np.float64)  # (n,)
    n = len(d)
    if n == 0:
        raise HarnessError("paired bootstrap: the two evaluations share no task ids; evaluate both on the same validation split")
    if B < 1:
        raise HarnessError(f"paired bootstrap: B={B} must be at least 1")
    strata = np.asarray(strata if strata is not None else np.full(n, "all")).astype(str)
    labels, inverse = np.unique(strata, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    d_sorted = d[order]  # (n,) tasks grouped by stratum
    sizes = np.bincount(inverse, minlength=len(labels))  # (S,)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))  # (S,)
    col_size = np.repeat(sizes, sizes)  # (n,) size of the column's stratum
    col_offset = np.repeat(offsets, sizes)  # (n,)

    rng = np.random.default_rng(seed)
    overall = np.empty(B)  # (B,)
    per_stratum = np.empty((B, len(labels)))  # (B, S)
    chunk = max(1, _CHUNK_CELLS // max(n, 1))
    for lo in range(0, B, chunk):  # a loop over memory-sized chunks, not over resamples
        b = min(chunk, B - lo)
        idx = col_offset + (rng.random((b, n)) * col_size).astype(np.int64)  # (b, n): resample within stratum
        sample = d_sorted[idx]  # (b, n)
        sums = np.add.reduceat(sample, offsets, axis=1)  # (b, S)
        per_stratum[lo:lo + b] = sums / sizes
        overall[lo:lo + b] = sums.sum(axis=1) / n  # stratum means weighted by stratum size

    tail = (1.0 - confidence) / 2 * 100
    lo_q, hi_q = tail, 100 - tail
    ci = np.percentile(overall, [lo_q, hi_q])
    strata_ci = np.percentile(per_stratum, [lo_q, hi_q], axis=0)  # (2, S)
    return {
        "delta": float(d.mean()),
        "ci_low": float(ci[0]),
        "ci_high": float(ci[1]),
        "n_tasks": n,
        "B": B,
        "seed": seed,
        "per_stratum": {
            str(label): {"delta": float(d_sorted[offsets[i]:offsets[i] + sizes[i]].mean()),
                         "ci_low": float(strata_ci[0, i]), "ci_high": float(strata_ci[1, i]), "n_tasks": int(sizes[i])}
            for i, label in enumerate(labels)
        },
    }


def wilcoxon_p(child: np.ndarray, parent: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value of the paired differences (1.0 when all differences are 0)."""
    from scipy.stats import wilcoxon

    d = np.asarray(child, dtype=np.float64) - np.asarray(parent, dtype=np.float64)
    if len(d) == 0 or np.all(d == 0):
        return 1.0
    try:
        return float(wilcoxon(d, alternative="two-sided").pvalue)
    except ValueError:
        return 1.0
