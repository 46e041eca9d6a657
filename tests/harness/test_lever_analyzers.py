"""The analyzers behind the new levers: length-biased advantages (token-mean) and weak-spread groups (SNR)."""

import numpy as np
import pytest


def _lengths(values):
    return [[7] * int(n) for n in values]


def test_length_biased_advantage_under_a_sequence_mean(art, tmp_path):
    # 3 steps x 4 groups x 4: inside every group the right answers are the long ones.
    rewards = np.tile([1.0, 1.0, 0.0, 0.0], 12)
    lengths = np.tile([30, 24, 6, 4], 12)
    table = art.rollouts(rewards=rewards, advantage=rewards - 0.5, completion_tokens=_lengths(lengths))
    r = art.run_builtin("length_advantage", art.ctx_for(tmp_path, rollouts_t=table, recipe={"grpo": {"loss_aggregation": "paper"}}))
    m = r["metrics"]
    expected = np.corrcoef([30, 24, 6, 4], [0.5, 0.5, -0.5, -0.5])[0, 1]
    assert m["signal/length_advantage_corr"] == pytest.approx(expected) and m["signal/length_advantage_groups"] == 12
    assert m["signal/length_cv_in_groups"] == pytest.approx(np.std([30, 24, 6, 4]) / 16)
    assert "longer responses get the larger advantages" in art.by_id(r, "signal.length_biased_advantage")["message"]
    # Under token-mean the lever is already pulled: the same evidence, no finding.
    done = art.run_builtin("length_advantage", art.ctx_for(tmp_path, "tm", rollouts_t=table,
                                                           recipe={"grpo": {"loss_aggregation": "token-mean"}}))
    assert done["metrics"]["signal/length_advantage_corr"] == pytest.approx(expected) and not done["findings"]


def test_no_length_bias_when_length_does_not_go_with_advantage(art, tmp_path):
    rewards = np.tile([1.0, 0.0, 1.0, 0.0], 12)
    lengths = np.tile([20, 20, 8, 8], 12)  # long and short alike win half the time
    table = art.rollouts(rewards=rewards, advantage=rewards - 0.5, completion_tokens=_lengths(lengths))
    r = art.run_builtin("length_advantage", art.ctx_for(tmp_path, rollouts_t=table))
    assert r["metrics"]["signal/length_advantage_corr"] == pytest.approx(0.0) and not r["findings"]
    # filtered rows do not count: drop every group, nothing is measured
    gone = art.rollouts(rewards=rewards, kept=[False] * 48, completion_tokens=_lengths(lengths))
    assert art.run_builtin("length_advantage", art.ctx_for(tmp_path, "gone", rollouts_t=gone))["metrics"] == {}


def test_weak_spread_groups(art, tmp_path):
    # 12 groups: 7 with binary spread 0.5, 4 whose rewards differ by a sliver, 1 dead.
    strong = [1.0, 0.0, 1.0, 0.0]
    weak = [0.51, 0.5, 0.5, 0.5]
    rewards = np.array(strong * 7 + weak * 4 + [0.0] * 4)
    table = art.rollouts(rewards=rewards)
    r = art.run_builtin("spread_concentration", art.ctx_for(tmp_path, rollouts_t=table))
    m = r["metrics"]
    assert m["signal/spread_live_groups"] == 11 and m["signal/weak_spread_group_frac"] == pytest.approx(4 / 11)
    assert m["signal/spread_top_half_share"] == pytest.approx(5 * 0.5 / (7 * 0.5 + 4 * np.std(weak)))
    assert art.by_id(r, "signal.weak_spread_groups")["severity"] == "info"
    even = art.run_builtin("spread_concentration", art.ctx_for(tmp_path, "even", rollouts_t=art.rollouts()))
    assert even["metrics"]["signal/weak_spread_group_frac"] == 0.0 and not even["findings"]
