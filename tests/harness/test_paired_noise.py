"""The seed term of a seed-matched comparison (a candidate against its control): measured on the
comparison's own per-seed differences, not read off the unpaired floor."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from evo.harness import stats
from evo.harness.compare import compare_runs
from evo.harness.outcome import classify

N_TASKS, K = 90, 8


def _strata(n):
    return {f"t{t:03d}": ("easy", "medium", "hard")[t % 3] for t in range(n)}


def _table(art, rng, p):
    scores = {f"t{t:03d}": list((rng.random(K) < p[t]).astype(float)) for t in range(N_TASKS)}
    return art.eval_table(scores, _strata(N_TASKS))


def _arms(art, rng, base, effect, shared_sigma, own_sigma):
    """One seed's (control, candidate) tables: the seed's luck (`shared_sigma`) moves both arms alike, as two
    recipes trained from one checkpoint under one seed do; `own_sigma` is where their trainings part."""
    shared = rng.normal(0, shared_sigma)
    tables = []
    for shift in (0.0, effect):
        p = np.clip(base + shared + shift + rng.normal(0, own_sigma) + rng.normal(0, 0.02, N_TASKS), 0, 1)
        tables.append(_table(art, rng, p))
    return tables


def test_paired_noise_is_the_spread_of_the_per_seed_differences(art):
    rng = np.random.default_rng(1)
    base = rng.random(N_TASKS)
    pairs = [_arms(art, rng, base, 0.05, 0.05, 0.01) for _ in range(3)]
    arms = [(stats.task_scores(cand), stats.task_scores(ctrl)) for ctrl, cand in pairs]
    noise = stats.paired_seed_noise(arms)
    diffs = [c.avg_at_k - b.avg_at_k for c, b in arms]
    assert noise.paired and noise.df == 2 and noise.runs == 3
    assert noise.sigma == pytest.approx(np.std(diffs, ddof=1))
    hard = [stats.avg_at_k_by_stratum(c)["hard"] - stats.avg_at_k_by_stratum(b)["hard"] for c, b in arms]
    assert noise.per_stratum["hard"] == pytest.approx(np.std(hard, ddof=1))
    upper = noise.sigma * np.sqrt(2 / scipy.stats.chi2.ppf(0.2, 2))
    assert noise.se(3, 3) == pytest.approx(upper / np.sqrt(3)), "the mean of 3 measured differences"
    assert stats.SeedNoise.from_dict(noise.to_dict()) == noise
    assert stats.paired_seed_noise(arms[:2]) is None, "two differences (1 df) are too thin to replace the floor"


def test_no_effect_under_shared_seed_luck_is_insufficient_at_least_95_percent_of_the_time(art):
    """A/B with no effect, 3 common seeds, each trial's seed term measured on its own 3 differences."""
    rng = np.random.default_rng(2)
    base = rng.random(N_TASKS)
    outcomes = []
    for _ in range(60):
        pairs = [_arms(art, rng, base, 0.0, 0.05, 0.015) for _ in range(3)]
        ctrl, cand = [p[0] for p in pairs], [p[1] for p in pairs]
        noise = stats.paired_seed_noise(zip(map(stats.task_scores, cand), map(stats.task_scores, ctrl)))
        from evo.harness.compare import paired_comparison

        result = paired_comparison(cand, ctrl, B=2000, noise=noise, child_seeds=3, parent_seeds=3)
        outcomes.append(classify(result, k=result["k"])[0])
    assert sum(o == "insufficient" for o in outcomes) / len(outcomes) >= 0.95, outcomes


def test_a_gain_hidden_by_the_unpaired_floor_is_resolved_by_its_seed_matched_runs(art):
    """+0.06 under seed luck of 0.05 per arm that both arms share, over 30 trials: the workspace floor (4
    calibration runs, the arms read as independent) almost never resolves it; the trial's own three
    seed-matched differences mostly do (the rest is eval sampling, which both terms count)."""
    from evo.harness.compare import paired_comparison

    rng = np.random.default_rng(3)
    base = np.clip(rng.random(N_TASKS), 0.1, 0.8)
    resolved = {"unpaired": 0, "paired": 0}
    for _ in range(30):
        calibration = [stats.task_scores(_table(art, rng, np.clip(base + rng.normal(0, 0.05), 0, 1))) for _ in range(4)]
        pairs = [_arms(art, rng, base, 0.06, 0.05, 0.005) for _ in range(3)]
        ctrl, cand = [p[0] for p in pairs], [p[1] for p in pairs]
        own = stats.paired_seed_noise(zip(map(stats.task_scores, cand), map(stats.task_scores, ctrl)))
        for name, noise in (("unpaired", stats.seed_noise([calibration])), ("paired", own)):
            result = paired_comparison(cand, ctrl, B=1000, noise=noise, child_seeds=3, parent_seeds=3)
            resolved[name] += classify(result, k=result["k"])[0] == "improvement"
    assert resolved["unpaired"] <= 3 and resolved["paired"] >= 12, resolved


def test_compare_runs_pairs_seed_matched_folders_from_three_seeds(art, tmp_path):
    rng = np.random.default_rng(4)
    base = rng.random(N_TASKS)
    floor = stats.SeedNoise(0.05, {}, 3, 4)
    ctrl_dirs, cand_dirs = [], []
    for seed in range(3):
        ctrl, cand = _arms(art, rng, base, 0.05, 0.05, 0.005)
        ctrl_dirs.append(art.write_run(tmp_path / f"control-{seed}", eval_t=ctrl))
        cand_dirs.append(art.write_run(tmp_path / f"candidate-{seed}", eval_t=cand))
    unpaired = compare_runs(cand_dirs, ctrl_dirs, B=500, noise=floor)
    paired = compare_runs(cand_dirs, ctrl_dirs, B=500, noise=floor, paired=True)
    assert unpaired["noise"] == floor.to_dict()
    assert paired["noise"]["paired"] and paired["noise"]["runs"] == 3
    assert paired["noise_floor"] < unpaired["noise_floor"]
    assert any("under each of 3 common seeds" in r for r in paired["reasons"])
    two = compare_runs(cand_dirs[:2], ctrl_dirs[:2], B=500, noise=floor, paired=True)
    assert two["noise"] == floor.to_dict(), "below 3 seeds the workspace floor stands"
