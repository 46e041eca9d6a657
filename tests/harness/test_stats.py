"""Statistics against scipy and slow reference implementations."""

from itertools import combinations

import numpy as np
import pytest
import scipy.stats

from evo.errors import HarnessError
from evo.harness import stats


def _loop_bootstrap(child, parent, strata, B, seed):
    """Reference: one resample per Python iteration, drawing from the generator in the same order."""
    d = np.asarray(child, float) - np.asarray(parent, float)
    labels, inverse = np.unique(np.asarray(strata).astype(str), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    d_sorted = d[order]
    sizes = np.bincount(inverse)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    col_size, col_offset = np.repeat(sizes, sizes), np.repeat(offsets, sizes)
    rng = np.random.default_rng(seed)
    means = np.empty(B)
    for b in range(B):
        idx = col_offset + (rng.random(len(d)) * col_size).astype(np.int64)
        means[b] = d_sorted[idx].mean()
    return np.percentile(means, [2.5, 97.5])


def test_bootstrap_matches_loop_reference_with_same_draws():
    rng = np.random.default_rng(1)
    child, parent = rng.random(78), rng.random(78)
    strata = np.array(["aime24"] * 30 + ["aime25"] * 30 + ["cnmo"] * 18)
    fast = stats.paired_bootstrap(child, parent, strata, B=2000, seed=7)
    lo, hi = _loop_bootstrap(child, parent, strata, 2000, 7)
    assert fast["ci_low"] == pytest.approx(lo, abs=1e-12)
    assert fast["ci_high"] == pytest.approx(hi, abs=1e-12)
    assert fast["delta"] == pytest.approx((child - parent).mean())
    assert set(fast["per_stratum"]) == {"aime24", "aime25", "cnmo"}
    assert fast["per_stratum"]["cnmo"]["n_tasks"] == 18


def test_bootstrap_chunking_does_not_change_draws(monkeypatch):
    rng = np.random.default_rng(2)
    child, parent = rng.random(40), rng.random(40)
    whole = stats.paired_bootstrap(child, parent, B=3000, seed=3)
    monkeypatch.setattr(stats, "_CHUNK_CELLS", 40 * 7)  # 7 resamples per chunk
    chunked = stats.paired_bootstrap(child, parent, B=3000, seed=3)
    assert (whole["ci_low"], whole["ci_high"]) == (chunked["ci_low"], chunked["ci_high"])


def test_bootstrap_interval_agrees_with_scipy_percentile_bootstrap():
    rng = np.random.default_rng(4)
    child = rng.random(60)
    parent = child - 0.05 + rng.normal(0, 0.1, 60)
    ours = stats.paired_bootstrap(child, parent, B=10_000, seed=0)
    ref = scipy.stats.bootstrap((child - parent,), np.mean, n_resamples=10_000, method="percentile",
                                confidence_level=0.95, random_state=np.random.default_rng(0)).confidence_interval
    assert ours["ci_low"] == pytest.approx(ref.low, abs=0.01)
    assert ours["ci_high"] == pytest.approx(ref.high, abs=0.01)


def test_stratified_resample_keeps_each_stratum_inside_itself():
    # Stratum "a" differences are all +1, stratum "b" all -1: any within-stratum resample
    # keeps each stratum's mean exact, so the interval collapses onto the point estimate.
    child = np.array([1.0] * 6 + [0.0] * 4)
    parent = np.array([0.0] * 6 + [1.0] * 4)
    strata = np.array(["a"] * 6 + ["b"] * 4)
    r = stats.paired_bootstrap(child, parent, strata, B=500, seed=0)
    assert r["ci_low"] == pytest.approx(0.2) and r["ci_high"] == pytest.approx(0.2)
    assert r["per_stratum"]["a"]["ci_low"] == 1.0 and r["per_stratum"]["b"]["ci_high"] == -1.0
    unstratified = stats.paired_bootstrap(child, parent, B=500, seed=0)
    assert unstratified["ci_high"] - unstratified["ci_low"] > 0.5


def test_bootstrap_is_reproducible_and_seed_dependent():
    rng = np.random.default_rng(5)
    child, parent = rng.random(30), rng.random(30)
    a = stats.paired_bootstrap(child, parent, B=1000, seed=11)
    b = stats.paired_bootstrap(child, parent, B=1000, seed=11)
    c = stats.paired_bootstrap(child, parent, B=1000, seed=12)
    assert a == b and a["ci_low"] != c["ci_low"]


def test_bootstrap_without_tasks_is_an_error():
    with pytest.raises(HarnessError, match="share no task"):
        stats.paired_bootstrap(np.array([]), np.array([]))


def test_wilcoxon_matches_scipy_and_handles_ties():
    rng = np.random.default_rng(6)
    child, parent = rng.random(25), rng.random(25)
    assert stats.wilcoxon_p(child, parent) == pytest.approx(scipy.stats.wilcoxon(child - parent).pvalue)
    assert stats.wilcoxon_p(child, child) == 1.0


def _brute_pass_at_k(n, c, k):
    samples = [1] * c + [0] * (n - c)
    subsets = list(combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,c,k", [(8, 0, 1), (8, 1, 1), (8, 1, 4), (8, 3, 4), (8, 5, 4), (6, 2, 6), (5, 5, 2)])
def test_pass_at_k_is_the_unbiased_estimator(n, c, k):
    assert stats.pass_at_k(np.array([n]), np.array([c]), k)[0] == pytest.approx(_brute_pass_at_k(n, c, k))


def test_pass_at_k_rejects_k_above_samples():
    with pytest.raises(HarnessError, match="k <= the smallest"):
        stats.pass_at_k(np.array([2]), np.array([1]), 4)


def test_task_scores_average_samples_per_task(art):
    table = art.eval_table({"b": [1, 0, 0, 1], "a": [1, 1, 1, 0], "c": [0.5, 0.5]}, {"a": "x", "b": "y", "c": "y"})
    s = stats.task_scores(table)
    assert list(s.task_ids) == ["a", "b", "c"]
    assert list(s.mean) == [0.75, 0.5, 0.5]
    assert list(s.samples) == [4, 4, 2] and list(s.passes) == [3, 2, 0]
    assert s.avg_at_k == pytest.approx((0.75 + 0.5 + 0.5) / 3)
    assert stats.avg_at_k_by_stratum(s) == {"x": 0.75, "y": 0.5}
