"""Score and signal analyzers on synthetic artifacts with answers computed by hand."""

import numpy as np
import pytest

SCORES = {"t0": [1, 1, 1, 1], "t1": [0, 0, 0, 0], "t2": [1, 0, 1, 0], "t3": [1, 0, 0, 0]}
STRATA = {"t0": "easy", "t1": "easy", "t2": "hard", "t3": "hard"}


def groups_to_rewards(groups):
    return np.concatenate([np.asarray(g, float) for g in groups])


def test_avg_at_k_per_task_and_stratum(tmp_path, art):
    ctx = art.ctx_for(tmp_path, eval_t=art.eval_table(SCORES, STRATA))
    r = art.run_builtin("avg_at_k", ctx)
    m = r["metrics"]
    assert m["score/avg_at_k"] == pytest.approx((1 + 0 + 0.5 + 0.25) / 4)
    assert m["score/avg_at_k/easy"] == pytest.approx(0.5)
    assert m["score/avg_at_k/hard"] == pytest.approx(0.375)
    assert (m["score/k"], m["score/n_tasks"]) == (4, 4)
    assert m["score/unsolved_task_frac"] == 0.25 and m["score/solved_task_frac"] == 0.25
    assert r["findings"] == []


def test_avg_at_k_flags_uneven_samples_and_unsolved_tasks(tmp_path, art):
    scores = {"a": [0, 0, 0, 0], "b": [0, 0, 0, 0], "c": [1, 0], "d": [0, 0, 0, 0]}
    r = art.run_builtin("avg_at_k", art.ctx_for(tmp_path, eval_t=art.eval_table(scores)))
    assert art.by_id(r, "score.uneven_samples")["evidence"]["rows"] == ["c"]
    assert art.by_id(r, "score.unsolved_tasks")["evidence"]["rows"] == ["a", "b", "d"]


def test_avg_at_k_without_eval_warns(tmp_path, art):
    r = art.run_builtin("avg_at_k", art.ctx_for(tmp_path, rollouts_t=art.rollouts()))
    assert art.by_id(r, "score.no_eval")["severity"] == "warning"


def test_pass_at_k_and_gap(tmp_path, art):
    r = art.run_builtin("pass_at_k", art.ctx_for(tmp_path, eval_t=art.eval_table(SCORES, STRATA)))
    m = r["metrics"]
    assert m["score/pass_at_k"] == pytest.approx(0.75)  # t0, t2, t3 pass at least once in 4
    assert m["score/pass_at_1"] == pytest.approx(0.4375)
    assert m["score/pass_at_k/easy"] == pytest.approx(0.5) and m["score/pass_at_k/hard"] == pytest.approx(1.0)
    gap = art.by_id(r, "score.pass_gap")
    assert gap["evidence"]["rows"] == ["t3"]  # solved sometimes, below 50% of samples


def dead_group_rollouts(art, **extra):
    # 3 steps x 4 groups x 4 samples; dead: g0, g1 (step 0, all 0), g8 (all 0) and g9 (all 1) in the last step.
    live = [1, 0, 1, 0]
    groups = [[0] * 4, [0] * 4, live, live, live, live, live, live, [0] * 4, [1] * 4, live, live]
    return art.rollouts(rewards=groups_to_rewards(groups), **extra)


def test_dead_group_ratio_overall_recent_and_kind(tmp_path, art):
    r = art.run_builtin("dead_groups", art.ctx_for(tmp_path, rollouts_t=dead_group_rollouts(art)))
    m = r["metrics"]
    assert m["signal/n_groups"] == 12
    assert m["signal/dead_group_ratio"] == pytest.approx(4 / 12)
    assert m["signal/dead_group_ratio_recent"] == pytest.approx(2 / 4)
    assert m["signal/dead_all_fail_frac"] == pytest.approx(3 / 4)
    rows = art.by_id(r, "signal.dead_groups")["evidence"]["rows"]
    assert "s0-g0-0" in rows and "s2-g1-3" in rows and "s0-g2-0" not in rows
    assert len(rows) == 16


def test_dead_groups_below_threshold_is_quiet(tmp_path, art):
    r = art.run_builtin("dead_groups", art.ctx_for(tmp_path, rollouts_t=art.rollouts()))
    assert r["metrics"]["signal/dead_group_ratio"] == 0 and r["findings"] == []


def test_reward_spread_and_latent_component_spread(tmp_path, art):
    n = 48
    judge = np.zeros(n)
    judge[0:4] = [0.1, 0.5, 0.2, 0.9]  # varies inside dead group g0 (step 0), not inside g1
    judge[32:36] = [0.3, 0.3, 0.4, 0.3]  # varies inside dead group s2-g0
    table = dead_group_rollouts(art, reward__judge_if=judge)
    recipe = {"reward": {"terms": [{"name": "correctness", "weight": 1.0, "mode": "add"}]}}
    r = art.run_builtin("reward_spread", art.ctx_for(tmp_path, rollouts_t=table, recipe=recipe))
    m = r["metrics"]
    assert m["signal/reward_spread"] == pytest.approx(8 * 0.5 / 12)
    assert m["signal/reward_spread/correctness"] == pytest.approx(8 * 0.5 / 12)
    assert m["signal/reward_spread/format"] == 0
    assert m["signal/spread_in_dead_groups/judge_if"] == pytest.approx(0.5)
    assert m["signal/spread_in_dead_groups/correctness"] == 0
    f = art.by_id(r, "signal.latent_spread")
    assert "judge_if" in f["message"] and "not in reward.terms" in f["message"]
    assert set(f["evidence"]["rows"]) == {f"s0-g0-{i}" for i in range(4)} | {f"s2-g0-{i}" for i in range(4)}


def test_midband_mass_from_group_pass_rates(tmp_path, art):
    groups = [[1, 0, 1, 0], [1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0],  # step 0: rates .5 .75 .25 0
              [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0],  # step 1
              [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]  # step 2: none in band
    table = art.rollouts(rewards=groups_to_rewards(groups))
    eval_t = art.eval_table(SCORES)  # task Avg@k: 1, 0, .5, .25 -> 2 of 4 in band
    r = art.run_builtin("midband", art.ctx_for(tmp_path, rollouts_t=table, eval_t=eval_t))
    m = r["metrics"]
    assert m["signal/midband_mass"] == pytest.approx(5 / 12)
    assert m["signal/midband_mass_recent"] == 0
    assert m["signal/eval_midband_mass"] == pytest.approx(0.5)
    assert m["signal/group_pass_rate_mean"] == pytest.approx(groups_to_rewards(groups).mean())
    assert art.by_id(r, "signal.low_midband")["evidence"]["rows"][0] == "s2-g0-0"


def test_answer_diversity_counts_distinct_answers_per_group(tmp_path, art):
    # 3 steps x 2 groups x 5 samples; the last step's groups agree on one answer ("" counts as an answer).
    answers = (["a", "b", "c", "d", "e"] + ["a", "a", "b", "b", ""]
               + ["x", "x", "x", "y", "y"] + ["1", "2", "3", "4", "5"]
               + ["7"] * 5 + [""] * 5)
    table = art.rollouts(n_groups=2, G=5, answer=answers)
    r = art.run_builtin("answer_diversity", art.ctx_for(tmp_path, rollouts_t=table))
    m = r["metrics"]
    assert m["signal/answer_diversity"] == pytest.approx((1 + 0.6 + 0.4 + 1 + 0.2 + 0.2) / 6)
    assert m["signal/answer_diversity_recent"] == pytest.approx(0.2)
    assert m["signal/single_answer_group_frac"] == pytest.approx(2 / 6)
    f = art.by_id(r, "signal.low_diversity")
    assert set(f["evidence"]["rows"]) == {f"s2-g{g}-{i}" for g in (0, 1) for i in range(5)}


def test_policy_trends_from_metrics_jsonl(tmp_path, art):
    metrics = [{"step": i, "policy/entropy": e, "policy/kl": kl, "policy/clip_frac_high": c}
               for i, (e, kl, c) in enumerate(zip([1, 1, .5, .5, .1, .1], [.01, .01, .05, .05, .2, .2], [.01, .01, .1, .1, .3, .3]))]
    adv = np.zeros(48)
    adv[:12] = 1.0
    table = art.rollouts(advantage=adv)
    r = art.run_builtin("policy_trends", art.ctx_for(tmp_path, rollouts_t=table, metrics=metrics))
    m = r["metrics"]
    assert (m["signal/entropy_first"], m["signal/entropy_last"]) == (1.0, 0.1)
    assert m["signal/entropy_change"] == pytest.approx(-0.9)
    assert (m["signal/kl_first"], m["signal/kl_last"]) == (0.01, 0.2)
    assert m["signal/zero_advantage_frac"] == 0.75 and m["signal/advantage_abs_mean"] == 0.25
    assert art.ids(r) == {"signal.entropy_falling", "signal.kl_rising", "signal.clip_high", "signal.zero_advantage"}


def test_a_kl_that_jumps_at_once_and_stays_is_a_step_too_large(tmp_path, art):
    """calc at ten times the default learning rate: KL 0 -> 3.0 after one update, then flat. It never *rises*
    between the thirds, so only the first third's level tells it."""
    kls = [0.0, 2.98, 4.29, 5.27, 4.06, 3.70, 3.40, 3.41, 3.21, 3.24, 3.61, 3.43, 3.49, 3.52, 3.62, 3.26, 3.26, 3.19]
    metrics = [{"step": i, "policy/kl": kl} for i, kl in enumerate(kls)]
    r = art.run_builtin("policy_trends", art.ctx_for(tmp_path, rollouts_t=art.rollouts(), metrics=metrics))
    assert r["metrics"]["signal/kl_first"] > 1.0 and r["metrics"]["signal/kl_change"] < 2.0
    assert "signal.kl_jump" in art.ids(r) and "signal.kl_rising" not in art.ids(r)
    calm = [{"step": i, "policy/kl": kl} for i, kl in enumerate([0.0, 0.02, 0.05, 0.08, 0.1, 0.15])]
    quiet = art.run_builtin("policy_trends", art.ctx_for(tmp_path, "b", rollouts_t=art.rollouts(), metrics=calm))
    assert "signal.kl_jump" not in art.ids(quiet)


def test_policy_trends_fall_back_to_rollout_columns(tmp_path, art):
    entropy = np.repeat([2.0, 1.0, 0.2], 16)  # per step
    r = art.run_builtin("policy_trends", art.ctx_for(tmp_path, rollouts_t=art.rollouts(entropy=entropy)))
    assert r["metrics"]["signal/entropy_first"] == pytest.approx(2.0)
    assert r["metrics"]["signal/entropy_last"] == pytest.approx(0.2)
    assert "signal.entropy_falling" in art.ids(r)
    healthy = art.run_builtin("policy_trends", art.ctx_for(tmp_path, "h", rollouts_t=art.rollouts()))
    assert healthy["findings"] == []


def test_filter_reasons_counted_by_reason(tmp_path, art):
    reasons = (["std_group: spread 0 < 1e-06"] * 24 + ["anomaly: truncated"] * 8
               + ["anomaly: repeated_ngram (4-gram x6 > 4)"] * 4 + [""] * 12)
    r = art.run_builtin("filter_reasons", art.ctx_for(tmp_path, rollouts_t=art.rollouts(filter_reason=reasons)))
    m = r["metrics"]
    assert m["signal/filter_dropped_frac"] == pytest.approx(36 / 48)
    assert m["signal/filter_dropped/std_group/spread"] == pytest.approx(0.5)
    assert m["signal/filter_dropped/anomaly/truncated"] == pytest.approx(8 / 48)
    assert m["signal/filter_dropped/anomaly/repeated_ngram"] == pytest.approx(4 / 48)
    f = art.by_id(r, "signal.filter_drops")
    assert "std_group/spread" in f["message"] and f["evidence"]["rows"][0] == "s0-g0-0"
