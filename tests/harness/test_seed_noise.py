"""Training-seed noise: the pooled spread, the widened interval (against a slow reference),
and the learning-curve and continuation analyzers that the keep-learning loop reads."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from evo.harness import stats
from evo.harness.compare import compare_runs, paired_comparison


def _scores(rng, n_tasks, k, p):
    """{task: [k scores]} with per-task success probability p[t]."""
    return {f"t{t:03d}": list((rng.random(k) < p[t]).astype(float)) for t in range(n_tasks)}


def _strata(n_tasks):
    return {f"t{t:03d}": ("easy", "medium", "hard")[t % 3] for t in range(n_tasks)}


def test_pooled_seed_sigma_is_the_pooled_sample_std():
    sets = [[(0.60, {"a": 0.5}), (0.64, {"a": 0.6}), (0.59, {"a": 0.5})], [(0.70, {}), (0.72, {})], [(0.9, {})]]
    noise = stats.seed_noise(sets)
    sq = np.var([0.60, 0.64, 0.59]) * 3 + np.var([0.70, 0.72]) * 2
    assert noise.df == 3 and noise.runs == 5
    assert noise.sigma == pytest.approx(np.sqrt(sq / 3))
    assert noise.per_stratum["a"] == pytest.approx(np.std([0.5, 0.6, 0.5], ddof=1))
    assert stats.seed_noise([[(0.5, {})], [(0.6, {})]]) is None, "single runs measure no spread"
    assert noise.floor(None, None) == 0.0
    upper = noise.sigma * np.sqrt(3 / scipy.stats.chi2.ppf(0.2, 3))  # sigma's 80% upper confidence limit
    assert noise.sigma_upper() == pytest.approx(upper) and upper > 1.7 * noise.sigma  # df 3: thin evidence
    assert noise.floor(2, 2) == pytest.approx(scipy.stats.norm.ppf(0.975) * upper)
    many = stats.SeedNoise(noise.sigma, {}, 200, 201)
    assert many.sigma_upper() == pytest.approx(noise.sigma, rel=0.07), "the limit shrinks to sigma as runs accumulate"


def _reference_interval(child_tables, parent_tables, strata, noise, n_child, n_parent, B, seed):
    """Slow reference: per-task means over every seed's samples, a loop bootstrap within strata
    drawing in the fast path's order, then the seed term added in quadrature."""
    def per_task(tables):
        acc = {}
        for table in tables:
            for task, score in zip(table.column("task_id").to_pylist(), table.column("score").to_pylist()):
                acc.setdefault(task, []).append(score)
        return {t: np.mean(v) for t, v in acc.items()}

    c, p = per_task(child_tables), per_task(parent_tables)
    tasks = sorted(set(c) & set(p))
    d = np.array([c[t] - p[t] for t in tasks])
    labels = np.array([strata[t] for t in tasks])
    uniq, inverse = np.unique(labels, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    d_sorted, sizes = d[order], np.bincount(inverse)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(B):
        idx = np.repeat(offsets, sizes) + (rng.random(len(d)) * np.repeat(sizes, sizes)).astype(np.int64)
        means.append(d_sorted[idx].mean())
    lo, hi = np.percentile(means, [2.5, 97.5])
    delta = d.mean()
    sigma_upper = noise.sigma * np.sqrt(noise.df / scipy.stats.chi2.ppf(0.2, noise.df))
    seed_var = sigma_upper ** 2 * sum(1 / n for n in (n_child, n_parent) if n)
    z = scipy.stats.norm.ppf(0.975)
    sides = [z * np.sqrt((half / z) ** 2 + seed_var) for half in (delta - lo, hi - delta)]
    return delta, delta - sides[0], delta + sides[1], lo, hi


def test_two_seed_interval_matches_a_slow_reference_and_is_wider_than_task_sampling(art):
    rng = np.random.default_rng(3)
    n, k = 60, 4
    p = rng.random(n)
    strata = _strata(n)
    child = [art.eval_table(_scores(rng, n, k, np.clip(p + 0.05, 0, 1)), strata) for _ in range(2)]
    parent = [art.eval_table(_scores(rng, n, k, p), strata) for _ in range(2)]
    noise = stats.seed_noise([[stats.task_scores(t) for t in child], [stats.task_scores(t) for t in parent]])
    got = paired_comparison(child, parent, B=3000, seed=11, noise=noise, child_seeds=2, parent_seeds=2)
    delta, lo, hi, boot_lo, boot_hi = _reference_interval(child, parent, strata, noise, 2, 2, 3000, 11)
    assert got["delta"] == pytest.approx(delta, abs=1e-12)
    assert got["boot_ci_low"] == pytest.approx(boot_lo, abs=1e-12) and got["boot_ci_high"] == pytest.approx(boot_hi, abs=1e-12)
    assert got["ci_low"] == pytest.approx(lo, abs=1e-12) and got["ci_high"] == pytest.approx(hi, abs=1e-12)
    assert got["ci_high"] - got["ci_low"] > got["boot_ci_high"] - got["boot_ci_low"]
    assert got["k"] == 2 * k, "two seeds' samples pooled per task"
    # A fixed parent (the checkpoint itself) contributes no seed term: narrower than two drawn recipes.
    fixed = paired_comparison(child, parent[:1], B=3000, seed=11, noise=noise, child_seeds=2, parent_seeds=None)
    assert fixed["noise_floor"] < got["noise_floor"]


def test_aa_comparisons_are_insufficient_at_least_95_percent_of_the_time(art):
    """Two training seeds of one recipe: a model-level seed shift plus eval sampling; the widened interval covers it."""
    rng = np.random.default_rng(0)
    n, k, sigma_seed = 90, 8, 0.02
    base = rng.random(n)
    strata = _strata(n)

    def run():
        shift = rng.normal(0, sigma_seed)
        return art.eval_table(_scores(rng, n, k, np.clip(base + shift + rng.normal(0, 0.03, n), 0, 1)), strata)

    # Each trial measures its own floor from the default 4 calibration runs, as a fresh workspace does:
    # the procedure has to hold even when those few runs happen to agree and underestimate sigma.
    outcomes = []
    for _ in range(60):
        noise = stats.seed_noise([[stats.task_scores(run()) for _ in range(4)]])
        outcomes.append(compare_runs_tables(run(), run(), noise))
    assert sum(o == "insufficient" for o in outcomes) / len(outcomes) >= 0.95, outcomes


def compare_runs_tables(child, parent, noise):
    from evo.harness.outcome import classify

    result = paired_comparison(child, parent, B=2000, noise=noise)
    return classify(result, k=result["k"])[0]


def test_compare_runs_takes_replicate_folders(art, tmp_path):
    rng = np.random.default_rng(5)
    p = rng.random(30)
    runs = [art.write_run(tmp_path / f"c{i}", eval_t=art.eval_table(_scores(rng, 30, 4, p))) for i in range(2)]
    base = art.write_run(tmp_path / "b", eval_t=art.eval_table(_scores(rng, 30, 4, p)))
    out = compare_runs(runs, base, B=500, noise=stats.SeedNoise(0.02, {}, 3, 4), parent_seeds=None)
    assert out["child_seeds"] == 2 and out["baseline_seeds"] is None
    upper = 0.02 * np.sqrt(3 / scipy.stats.chi2.ppf(0.2, 3))
    assert out["noise_floor"] == pytest.approx(scipy.stats.norm.ppf(0.975) * upper * np.sqrt(0.5))
    assert any("seed noise floor" in r for r in out["reasons"])
    bare = compare_runs(runs[0], base, B=500)
    assert any("noise floor not measured" in r for r in bare["reasons"])


# ---------------------------------------------------------------- analyzers
def test_learning_curve_slope_and_its_t_statistic(art, tmp_path):
    rising = [{"step": i, "reward/mean": 0.3 + 0.02 * i + 0.01 * ((-1) ** i), "signal/dead_group_ratio": 0.2 + 0.01 * i}
              for i in range(20)]
    out = art.run_builtin("learning_curve", art.ctx_for(tmp_path, "r", metrics=rising))
    fit = scipy.stats.linregress(np.arange(10), [r["reward/mean"] for r in rising[10:]])
    assert out["metrics"]["signal/reward_slope"] == pytest.approx(fit.slope)
    assert out["metrics"]["signal/reward_slope_t"] == pytest.approx(fit.slope / fit.stderr)
    assert "signal.reward_rising" in art.ids(out)
    assert out["metrics"]["signal/dead_group_ratio_change"] == pytest.approx(0.01 * (20 - 20 // 3))
    flat = [{"step": i, "reward/mean": 0.5 + 0.05 * ((-1) ** i)} for i in range(20)]
    quiet = art.run_builtin("learning_curve", art.ctx_for(tmp_path, "f", metrics=flat))
    assert "signal.reward_flat" in art.ids(quiet) and "signal.reward_rising" not in art.ids(quiet)


def test_continuation_reads_the_lineage(art, tmp_path):
    from evo.harness.context import AnalyzerContext, RunArtifacts

    run = art.write_run(tmp_path / "v3", metrics=[])
    cont = {"via": "control steps20-seed0", "outcome": "improvement", "delta": 0.08, "ci_low": 0.04, "ci_high": 0.12,
            "noise_floor": 0.02, "value": 0.8, "steps": 20, "time": "t"}
    lineage = [
        {"name": "v1", "parents": ["v0"], "intervention": {"kind": "continue"}, "outcome": "improvement", "continuations": []},
        {"name": "v2", "parents": ["v1"], "intervention": {"kind": "harness"}, "outcome": "insufficient", "continuations": []},
        {"name": "v3", "parents": ["v2"], "intervention": {"kind": "continue"}, "outcome": "improvement",
         "continuations": [cont]},
    ]
    ctx = AnalyzerContext(run=RunArtifacts(run), lineage=lineage, version="v3")
    out = art.run_builtin("continuation", ctx)
    m = out["metrics"]
    # The harness revision between the two continuations trained nothing: it neither counts nor breaks the streak.
    assert m["version/continuation_measured"] == 1 and m["version/continue_streak"] == 2
    policy = [dict(lineage[0], intervention={"kind": "policy"}), *lineage[1:]]
    broken = art.run_builtin("continuation", AnalyzerContext(run=RunArtifacts(run), lineage=policy, version="v3"))
    assert broken["metrics"]["version/continue_streak"] == 1
    assert m["version/continuation_z"] == pytest.approx(1.959964 * 0.08 / 0.04)
    assert "version.still_learning" in art.ids(out)
    lineage[-1]["continuations"] = [dict(cont, delta=0.005, ci_low=-0.02, ci_high=0.03, outcome="insufficient")]
    again = art.run_builtin("continuation", AnalyzerContext(run=RunArtifacts(run), lineage=lineage, version="v3"))
    assert "version.plateau" in art.ids(again) and again["metrics"]["version/continuation_z"] < 1.96
