"""Filters (StdGroupFilter, anomaly exclusion, Dual-Level, truncation masking) and reward composition."""

import pytest

from evo.errors import ConfigError
from evo.train.filters import FilterConfig, TrajectoryFlags, apply_filters, max_ngram_repeats
from evo.train.rewards import check_terms, total_reward, total_rewards


def _flags(n, **over):
    base = [TrajectoryFlags(num_tokens=3, tokens=[1, 2, 3], text="abc") for _ in range(n)]
    for i, kw in over.items():
        base[int(i)] = TrajectoryFlags(**{"num_tokens": 3, "tokens": [1, 2, 3], "text": "abc", **kw})
    return base


def _std_cfg(**kw):
    return FilterConfig.from_recipe({"std_group": {"enabled": True, **kw}})


def test_std_group_drops_constant_and_near_constant_groups_with_reason():
    rewards = [[1.0, 1.0, 1.0], [1.0, 1.0 + 1e-9, 1.0], [0.0, 1.0, 0.0]]
    out = apply_filters(rewards, None, [_flags(3) for _ in rewards], _std_cfg())
    assert [d.kept for d in out[0]] == [False] * 3
    assert out[0][0].reason == "std_group: spread 0 < 1e-06"
    # Not an exact-zero test: a 1e-9 spread carries no signal either.
    assert [d.kept for d in out[1]] == [False] * 3
    assert out[1][0].reason.startswith("std_group: spread 4.71e-10 < 1e-06")
    assert all(d.kept and d.reason == "" for d in out[2])


def test_std_group_on_a_named_component():
    rewards = [[0.0, 1.0], [0.0, 1.0]]
    components = {"format": [[1.0, 1.0], [0.0, 1.0]]}
    out = apply_filters(rewards, components, [_flags(2), _flags(2)], _std_cfg(component="format"))
    assert [d.kept for d in out[0]] == [False, False]  # total varies but format does not
    assert [d.kept for d in out[1]] == [True, True]
    with pytest.raises(ConfigError, match=r"filters.std_group.component: 'nope'.*use one of total, format"):
        apply_filters(rewards, components, [_flags(2), _flags(2)], _std_cfg(component="nope"))


def test_anomaly_rules_each_record_their_reason():
    cfg = FilterConfig.from_recipe({"anomaly": {"enabled": True, "rules": ["truncated", "empty", "repeated_ngram",
                                                                            "max_turns"],
                                                "ngram": 2, "max_ngram_repeats": 2}})
    flags = _flags(5, **{
        "0": {"truncated": True},
        "1": {"num_tokens": 0, "tokens": [], "text": ""},
        "2": {"tokens": [7, 8, 7, 8, 7, 8], "num_tokens": 6},
        "3": {"finish_reason": "max_turns"},
    })
    out = apply_filters([[0.0, 1.0, 0.0, 1.0, 0.5]], None, [flags], cfg)[0]
    assert [d.reason for d in out] == ["anomaly: truncated", "anomaly: empty",
                                       "anomaly: repeated_ngram (2-gram x3 > 2)", "anomaly: max_turns", ""]
    assert [d.kept for d in out] == [False, False, False, False, True]
    assert not any(d.in_group_stats for d in out[:4])
    assert max_ngram_repeats([1, 2, 1, 2, 1], 2) == 2


def test_dual_level_filter_applies_std_to_anomaly_survivors():
    cfg = FilterConfig.from_recipe({"anomaly": {"enabled": True, "rules": ["truncated"]},
                                    "std_group": {"enabled": True}})
    # The only reward variation comes from the truncated trajectory; once it is excluded the group is dead.
    out = apply_filters([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], None,
                        [_flags(3, **{"0": {"truncated": True}}), _flags(3)], cfg)
    assert [d.reason for d in out[0]] == ["anomaly: truncated", "std_group: spread 0 < 1e-06",
                                          "std_group: spread 0 < 1e-06"]
    assert all(d.kept for d in out[1])


def test_truncation_mask_keeps_group_statistics_but_masks_the_loss():
    cfg = FilterConfig.from_recipe({"truncation_mask": True})
    out = apply_filters([[1.0, 0.0]], None, [_flags(2, **{"1": {"truncated": True}})], cfg)[0]
    assert out[1].kept and out[1].masked and out[1].in_group_stats and not out[1].contributes
    assert out[0].contributes
    # Plain dicts work too (backtests replay stored rows).
    out = apply_filters([[1.0, 0.0]], None, [[{"truncated": False}, {"truncated": True}]], cfg)[0]
    assert [d.masked for d in out] == [False, True]


def test_unknown_anomaly_rule_is_a_config_error():
    with pytest.raises(ConfigError, match=r"filters.anomaly.rules\[0\]: 'loops'"):
        FilterConfig.from_recipe({"anomaly": {"enabled": True, "rules": ["loops"]}})


def test_reward_terms_add_gate_and_factor():
    comps = {"correctness": 0.0, "partial_credit": 0.5, "format": 1.0, "length": 0.8}
    terms = [{"name": "correctness", "weight": 1.0, "mode": "add"},
             {"name": "partial_credit", "weight": 0.5, "mode": "add"},
             {"name": "format", "mode": "gate"},
             {"name": "length", "mode": "factor"}]
    assert total_reward(comps, terms) == pytest.approx((0.0 + 0.25) * 1.0 * 0.8)
    assert total_reward(dict(comps, format=0.0), terms) == 0.0  # the gate closes
    cols = {k: [v, v] for k, v in comps.items()}
    cols["correctness"] = [0.0, 1.0]
    assert total_rewards(cols, terms) == pytest.approx([0.2, 1.0])


def test_unknown_reward_component_names_the_term_and_the_emitted_ones():
    terms = [{"name": "correctness"}, {"name": "style"}]
    with pytest.raises(ConfigError) as err:
        check_terms(terms, ("correctness", "format"))
    assert str(err.value) == ("recipe.yaml: reward.terms[1].name: 'style' is not a component this domain emits; "
                              "use one of correctness, format")
