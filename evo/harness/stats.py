"""Statistics for judging versions: Avg@k, pass@k, paired bootstrap, Wilcoxon.

The protocol follows the paper's appendix F: each task contributes one paired
observation, the difference of its Avg@k (mean score over k samples) between
two versions; a 95% interval comes from B = 10,000 task-level bootstrap
resamples with a fixed seed, and a two-sided Wilcoxon signed-rank test gives
the p-value.

Training-seed noise. A task bootstrap measures how the mean difference would
move under other validation tasks and other eval samples *of these two
models*; it says nothing about how much a model's Avg@k moves when the same
recipe is trained again under another seed. `SeedNoise` is that spread,
measured from replicate trainings (the noise-floor calibration of v0, and any
`search.train_seeds` replicates): a random-effects view in which a run's Avg@k
is mu(recipe) + u_seed + e, u_seed ~ N(0, sigma^2). `widen` adds the seed term
to a bootstrap interval per side: se^2 = (h_boot / z)^2 + sigma^2 (1/n_c + 1/n_b)
(n = the number of seeds behind each arm's score; a fixed model, such as the
parent a candidate started from, contributes no seed term), and the half-width
is t(nu) * se with nu the Welch-Satterthwaite degrees of freedom, since sigma
comes from only a few runs. The eval noise inside sigma is counted twice (it is
in the bootstrap too), which makes the interval conservative.

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
# The upper confidence level of the seed sigma every noise floor uses (SeedNoise.sigma_upper).
SIGMA_LEVEL = 0.8
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
                     B: int = DEFAULT_B, seed: int = 0, confidence: float = CONFIDENCE,
                     stratum_confidence: float | None = None) -> dict:
    """Stratified paired bootstrap of mean(child - parent) over tasks.

    `stratum_confidence` (default `confidence`) is the level of each stratum's
    interval; the judge passes a Bonferroni level so that three strata do not
    give three chances for a spurious "significantly worse".
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
    ci = np.percentile(overall, [tail, 100 - tail])
    s_tail = (1.0 - (confidence if stratum_confidence is None else stratum_confidence)) / 2 * 100
    strata_ci = np.percentile(per_stratum, [s_tail, 100 - s_tail], axis=0)  # (2, S)
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


def seed_paired_t(child: list[float], parent: list[float], *, confidence: float = CONFIDENCE) -> tuple[float, float | None]:
    """Mean of child - parent over training seeds (paired by seed) and its Student-t half-width (None under 2 seeds).

    For benches that train both arms under the same few seeds: the seeds, not the tasks, are the samples.
    """
    from scipy.stats import t as student_t

    d = np.asarray(child, dtype=float) - np.asarray(parent, dtype=float)
    if len(d) < 2:
        return float(d.mean()), None
    return float(d.mean()), float(student_t.ppf(0.5 + confidence / 2, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d)))


def z_value(confidence: float) -> float:
    """The two-sided normal quantile of `confidence` (1.96 at 0.95)."""
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


@dataclass(frozen=True)
class SeedNoise:
    """How much a recipe's Avg@k moves between training seeds, pooled over replicate sets.

    `sigma` is the pooled standard deviation of Avg@k between runs of one recipe
    that differ only in the training seed; `per_stratum` the same per stratum;
    `df` the degrees of freedom behind it (sum over sets of runs - 1); `runs`
    the number of runs it was measured from.

    A handful of runs that happen to agree underestimates sigma, and a floor
    built on that estimate lets seed luck through (measured: 4 calibration runs
    gave 0.0054 where later replicates spread 0.0075-0.0106). So every interval
    uses `sigma_upper`, the one-sided SIGMA_LEVEL upper confidence limit of
    sigma from its chi-square distribution on `df`: it shrinks towards sigma as
    replicates accumulate, and it is wide while the evidence is thin.

    `paired`: `sigma` is instead the spread, between seeds, of the *difference*
    of two recipes trained under the same seed from the same start
    (`paired_seed_noise`): the difference a seed-matched comparison averages
    over its n seeds, so its standard error is sigma / sqrt(n), not
    sigma * sqrt(2 / n).
    """

    sigma: float
    per_stratum: dict
    df: int
    runs: int
    paired: bool = False

    def se(self, n_child: int | None, n_baseline: int | None, *, stratum: str | None = None) -> float:
        """Standard error the seed noise adds to a difference of two scores (0 for two fixed models).

        `n_child` / `n_baseline`: seeds averaged into each side's score; None = a fixed model. Paired: the
        difference was measured `n_child` times (once per common seed).
        """
        if self.paired:
            return self.sigma_upper(stratum) / float(np.sqrt(n_child))
        terms = sum(1.0 / n for n in (n_child, n_baseline) if n)
        return self.sigma_upper(stratum) * float(np.sqrt(terms))

    def sigma_upper(self, stratum: str | None = None) -> float:
        """sigma (of the whole score or of one stratum) at its SIGMA_LEVEL upper confidence limit:
        sigma * sqrt(df / chi2_{1 - SIGMA_LEVEL}(df))."""
        from scipy.stats import chi2

        sigma = self.sigma if stratum is None else self.per_stratum.get(stratum, self.sigma)
        return sigma * float(np.sqrt(self.df / chi2.ppf(1.0 - SIGMA_LEVEL, self.df)))

    def floor(self, n_child: int | None, n_baseline: int | None, *, stratum: str | None = None,
              confidence: float = CONFIDENCE) -> float:
        """The noise floor: the half-width seed luck alone gives a difference (normal quantile of `se`)."""
        return z_value(confidence) * self.se(n_child, n_baseline, stratum=stratum)

    def to_dict(self) -> dict:
        return {"sigma": self.sigma, "per_stratum": dict(self.per_stratum), "df": self.df, "runs": self.runs,
                "paired": self.paired}

    @classmethod
    def from_dict(cls, data: dict | None) -> "SeedNoise | None":
        if not data or data.get("sigma") is None:
            return None
        return cls(float(data["sigma"]), {str(k): float(v) for k, v in (data.get("per_stratum") or {}).items()},
                   int(data.get("df", 0)), int(data.get("runs", 0)), bool(data.get("paired", False)))


def seed_noise(replicate_sets) -> SeedNoise | None:
    """Pooled seed-to-seed spread of Avg@k over sets of runs that differ only by training seed.

    Each set lists the runs of one recipe (same start, same schedule) trained
    under different seeds, each run as `(avg_at_k, {stratum: avg_at_k})` or as a
    `TaskScores`. Sets of one run carry no information and are skipped. The
    pooled variance is sum over sets of squared deviations from the set mean,
    divided by sum over sets of (runs - 1). Returns None when no set has two runs.
    """
    sq, sq_strata, df, runs = 0.0, {}, 0, 0
    for runs_of_recipe in replicate_sets:
        values = [(r.avg_at_k, avg_at_k_by_stratum(r)) if isinstance(r, TaskScores) else (float(r[0]), dict(r[1] or {}))
                  for r in runs_of_recipe]
        if len(values) < 2:
            continue
        totals = np.array([v[0] for v in values])  # (R,)
        sq += float(((totals - totals.mean()) ** 2).sum())
        for s in sorted(set().union(*(v[1] for v in values))):
            column = np.array([v[1][s] for v in values if v[1].get(s) is not None], dtype=np.float64)
            if len(column) >= 2:
                acc = sq_strata.setdefault(str(s), [0.0, 0])
                acc[0] += float(((column - column.mean()) ** 2).sum())
                acc[1] += len(column) - 1
        df += len(values) - 1
        runs += len(values)
    if df == 0:
        return None
    return SeedNoise(float(np.sqrt(sq / df)), {s: float(np.sqrt(v / d)) for s, (v, d) in sorted(sq_strata.items()) if d},
                     df, runs)


PAIRED_MIN_SEEDS = 3  # a spread of differences on fewer seeds (1 df) is too thin to stand in for the floor


def paired_seed_noise(arms) -> SeedNoise | None:
    """The seed noise of a seed-matched comparison, measured on the comparison itself; None below PAIRED_MIN_SEEDS.

    `arms`: one `(child, baseline)` pair of `TaskScores` per common training
    seed, the two recipes trained under that seed from the same checkpoint.
    They draw the same prompts and samples until their policies part, so some of
    their seed luck may be shared and cancel in the difference, or none: how much
    depends on how soon they part, so it is measured, not assumed. The spread
    between seeds of the difference itself (on the tasks both evaluated, per
    stratum too) is that noise, read like any sigma at its upper confidence
    limit on n - 1 df (what it measured on arithmetic and calc: docs/harness.md).
    """
    arms = list(arms)
    if len(arms) < PAIRED_MIN_SEEDS:
        return None
    differences = []
    for child, baseline in arms:
        both = pair(child, baseline)
        strata = {str(s): float(both.child[both.strata == s].mean() - both.parent[both.strata == s].mean())
                  for s in np.unique(both.strata)}
        differences.append((float(both.child.mean() - both.parent.mean()), strata))
    noise = seed_noise([differences])
    return None if noise is None else SeedNoise(noise.sigma, noise.per_stratum, noise.df, noise.runs, paired=True)


def widen(low: float, high: float, delta: float, seed_se: float, *, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Add the seed noise to a bootstrap interval around `delta`, each side on its own.

    The bootstrap half-width of a side is read as z * se_boot and the seed term
    `seed_se` (from `SeedNoise.se`, already at sigma's upper limit) is added in
    quadrature: half = z * sqrt(se_boot^2 + seed_se^2).
    """
    if seed_se <= 0:
        return low, high
    z = z_value(confidence)
    half = [z * float(np.sqrt((max(side, 0.0) / z) ** 2 + seed_se ** 2)) for side in (delta - low, high - delta)]
    return delta - half[0], delta + half[1]
