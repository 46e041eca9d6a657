"""Backtests replay stored rollouts under a reward or filter change, with hand-checked predictions."""

import numpy as np
import pytest

from evo.errors import ConfigError, HarnessError
from evo.harness.backtest import backtest

RECIPE = {
    "domain": {"name": "arithmetic"}, "model": {"name": "builtin:tiny-char"},
    "reward": {"terms": [{"name": "correctness", "weight": 1.0, "mode": "add"}]},
    "filters": {"std_group": {"enabled": False, "epsilon": 1e-6, "component": "total"},
                "anomaly": {"enabled": False, "rules": ["truncated", "empty", "repeated_ngram"], "ngram": 4, "max_ngram_repeats": 4},
                "truncation_mask": False},
    "grpo": {"scale_advantage_by_std": True},
}


@pytest.fixture
def run(tmp_path, art):
    # 12 groups of 4: the first 8 are dead under correctness (all 0); judge_if varies in 4 of those.
    correctness = np.zeros(48)
    correctness[32:] = np.tile([1, 0], 8)
    judge = np.zeros(48)
    judge[:16] = np.tile([0.1, 0.5, 0.2, 0.9], 4)
    truncated = np.zeros(48, bool)
    truncated[[33, 35, 40]] = True
    table = art.rollouts(rewards=correctness, reward__judge_if=judge, truncated=truncated)
    return art.write_run(tmp_path / "run", rollouts_t=table)


def test_adding_a_judge_term_rescues_dead_groups(run):
    change = {"reward": {"terms": [{"name": "correctness"}, {"name": "judge_if", "weight": 0.1}]}}
    r = backtest(run, change, RECIPE)
    assert (r["n_trajectories"], r["n_groups"]) == (48, 12)
    assert r["before"]["dead_groups"] == 8 and r["after"]["dead_groups"] == 4
    p = r["prediction"]
    assert p["rescued_dead_groups"] == 4 and p["rescued_dead_groups_frac"] == 0.5
    assert p["dead_group_ratio_delta"] == pytest.approx(-4 / 12)
    assert p["newly_dead_groups"] == 0
    assert r["after"]["reward_mean"] == pytest.approx((16 * 0.1 * 0.425 + 8) / 48)
    assert r["before"]["nonzero_advantage_frac"] == pytest.approx(16 / 48)
    assert r["after"]["nonzero_advantage_frac"] == pytest.approx(32 / 48)
    assert r["message"].startswith("50% of dead groups regain non-zero spread (4 of 8)")
    assert r["notes"] == []


def test_advantages_are_group_normalised(run):
    r = backtest(run, {"grpo": {"scale_advantage_by_std": False}}, RECIPE)
    # live groups [1,0,1,0]: mean .5, std .5 -> |A| = 0.5/(0.5+1e-6) scaled, 0.5 unscaled
    assert r["before"]["advantage_abs_mean"] == pytest.approx(16 / 48 * 0.5 / (0.5 + 1e-6))
    assert r["after"]["advantage_abs_mean"] == pytest.approx(16 / 48 * 0.5)


def test_std_group_filter_drops_dead_groups(run):
    r = backtest(run, {"filters": {"std_group": {"enabled": True, "epsilon": 1e-6}}}, RECIPE)
    assert r["before"]["kept_trajectories"] == 48
    assert r["after"]["kept_trajectories"] == 16 and r["after"]["kept_groups"] == 4
    assert r["prediction"]["kept_trajectories_delta"] == -32
    assert r["after"]["drop_reasons"] == {"std_group: spread": 32}


def test_std_group_on_a_component(run):
    change = {"filters": {"std_group": {"enabled": True, "component": "judge_if"}}}
    r = backtest(run, change, RECIPE)
    assert r["after"]["kept_groups"] == 4  # judge_if varies only in groups 0-3


def test_anomaly_exclusion_and_truncation_mask(run):
    anomaly = backtest(run, {"filters": {"anomaly": {"enabled": True, "rules": ["truncated"]}}}, RECIPE)
    assert anomaly["after"]["kept_trajectories"] == 45
    assert anomaly["after"]["drop_reasons"] == {"anomaly: truncated": 3}
    masked = backtest(run, {"filters": {"truncation_mask": True}}, RECIPE)
    assert masked["after"]["kept_trajectories"] == 48
    assert masked["after"]["contributing_trajectories"] == 45


def test_factor_and_gate_terms(run, art, tmp_path):
    fmt = np.ones(48)
    fmt[32:36] = 0.0
    table = art.rollouts(rewards=np.tile([1.0, 0.0], 24), reward__format=fmt)
    path = art.write_run(tmp_path / "fmt", rollouts_t=table)
    change = {"reward": {"terms": [{"name": "correctness"}, {"name": "format", "mode": "gate"}]}}
    r = backtest(path, change, RECIPE)
    assert r["after"]["dead_groups"] == 1 and r["prediction"]["newly_dead_groups"] == 1
    assert "1 live group loses its spread" in r["message"]


def test_change_needing_an_unstored_component_is_a_one_line_error(run):
    with pytest.raises(HarnessError, match=r"needs reward component 'efficiency', which .* does not store \(stored: correctness, format, judge_if\)"):
        backtest(run, {"reward": {"terms": [{"name": "correctness"}, {"name": "efficiency", "mode": "factor"}]}}, RECIPE)


def test_generation_changes_cannot_be_backtested(run):
    with pytest.raises(HarnessError, match="rollout: cannot be replayed"):
        backtest(run, {"rollout": {"max_new_tokens": 64}}, RECIPE)
    with pytest.raises(HarnessError, match="grpo.learning_rate: cannot be replayed"):
        backtest(run, {"grpo": {"learning_rate": 0.1}}, RECIPE)


def test_malformed_patch_names_the_key(run):
    with pytest.raises(ConfigError, match="filters.std_group.epsilonn: unknown key"):
        backtest(run, {"filters": {"std_group": {"epsilonn": 0.1}}}, RECIPE)


def test_recipe_that_does_not_match_stored_totals_is_noted(run):
    recipe = {**RECIPE, "reward": {"terms": [{"name": "correctness", "weight": 2.0}]}}
    r = backtest(run, {"filters": {"std_group": {"enabled": True}}}, recipe)
    assert "may not be the one the run trained with" in r["notes"][0]


def test_run_without_rollouts(tmp_path, art):
    path = art.write_run(tmp_path / "evalonly", eval_t=art.eval_table({"t": [1]}))
    with pytest.raises(HarnessError, match="no rollouts.parquet"):
        backtest(path, {"filters": {"truncation_mask": True}}, RECIPE)


def test_token_mean_moves_the_policy_gradient_weight_to_long_responses(art, tmp_path):
    # One step, two groups: the right answers are the long ones.
    rewards = np.array([1, 1, 0, 0, 1, 0, 0, 0], dtype=float)
    tokens = [[1] * n for n in (9, 9, 3, 3, 8, 2, 2, 2)]
    path = art.write_run(tmp_path / "long", rollouts_t=art.rollouts(n_steps=1, n_groups=2, rewards=rewards,
                                                                   completion_tokens=tokens))
    r = backtest(path, {"grpo": {"loss_aggregation": "token-mean"}}, RECIPE)
    n = np.array([9, 9, 3, 3, 8, 2, 2, 2], dtype=float)
    adv = np.concatenate([(rewards[:4] - 0.5) / (0.5 + 1e-6), (rewards[4:] - 0.25) / (np.sqrt(0.1875) + 1e-6)])
    long = n > np.median(n)
    for side, w in (("before", np.full(8, 1 / 8)), ("after", n / n.sum())):  # paper: 1 / (|G*| |g*|); token-mean: |T|/Σ|T|
        push = w * np.abs(adv)
        assert r[side]["long_response_signal_share"] == pytest.approx(push[long].sum() / push.sum())
        assert r[side]["long_vs_short_token_weight"] == pytest.approx((w / n)[long].mean() / (w / n)[~long].mean())
    assert r["after"]["long_vs_short_token_weight"] == pytest.approx(1.0)  # every token weighs the same
    assert r["before"]["long_response_signal_share"] < r["after"]["long_response_signal_share"]
    assert r["message"].startswith("loss aggregation paper -> token-mean: responses longer than their step's median carry")
    assert r["before"]["dead_groups"] == r["after"]["dead_groups"] == 0


def test_snr_filter_is_replayed_step_by_step(run):
    change = {"filters": {"snr": {"enabled": True, "top_p": 0.5, "loss_scaling": "linear"}}}
    r = backtest(run, change, RECIPE)
    # steps 0-1: every group dead, dropped as zero spread; step 2: four groups of spread 0.5, two hold half of it
    assert r["after"]["kept_groups"] == 2 and r["after"]["kept_trajectories"] == 8
    assert r["after"]["drop_reasons"] == {"snr: spread": 8, "snr: zero": 32}
    assert r["after"]["advantage_abs_mean"] == pytest.approx(8 * 0.5 / (0.5 + 1e-6) * 0.5 / 48)  # x kept ratio 2/4


def test_advantage_std_sample_is_replayable(run):
    r = backtest(run, {"grpo": {"advantage_std": "sample"}}, RECIPE)
    sample_std = np.sqrt(4 * 0.25 / 3)  # [1, 0, 1, 0] divided by n - 1
    assert r["after"]["advantage_abs_mean"] == pytest.approx(16 / 48 * 0.5 / (sample_std + 1e-6))


def test_refill_is_not_replayable_and_says_so(run):
    change = {"filters": {"std_group": {"enabled": True, "refill": True, "max_generation_batches": 3}}}
    r = backtest(run, change, RECIPE)
    refill = r["prediction"]["refill"]
    assert refill["replayable"] is False and refill["live_group_share"] == pytest.approx(4 / 12)
    assert refill["expected_generation_batches"] == pytest.approx(3.0) and not refill["capped"]
    assert r["message"].startswith("refill is not replayable (it samples prompt batches the stored rollouts do not hold); "
                                   "at the stored live-group share 33% a step needs about 3.0 generation batches to hold 4")
    assert any("is not replayed" in note for note in r["notes"])
    short = backtest(run, {"filters": {"std_group": {"enabled": True, "refill": True, "max_generation_batches": 2}}}, RECIPE)
    assert short["prediction"]["refill"]["capped"] and "stop short at about 3 live groups" in short["message"]
