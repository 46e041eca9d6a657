"""The four outcome classes at their boundaries (rules in evo/harness/outcome.py, docs/harness.md)."""

import pytest

from evo.harness.outcome import MIN_SAMPLES, MIN_STRATUM_TASKS, MIN_TASKS, classify, new_critical_findings


def headline(lo, hi, n=20, strata=None):
    return {"delta": (lo + hi) / 2, "ci_low": lo, "ci_high": hi, "n_tasks": n, "per_stratum": strata or {}}


def stratum(lo, hi, n=10):
    return {"delta": (lo + hi) / 2, "ci_low": lo, "ci_high": hi, "n_tasks": n}


@pytest.mark.parametrize("lo,hi,expected", [
    (0.001, 0.1, "improvement"),
    (0.0, 0.1, "insufficient"),      # an interval touching 0 does not exclude it
    (-0.1, -0.001, "regression"),
    (-0.1, 0.0, "insufficient"),
    (-0.05, 0.05, "insufficient"),
])
def test_headline_interval_decides_when_nothing_disagrees(lo, hi, expected):
    assert classify(headline(lo, hi), k=8)[0] == expected


def test_too_few_tasks_or_samples_is_insufficient_even_when_significant():
    assert classify(headline(0.2, 0.4, n=MIN_TASKS - 1), k=8)[0] == "insufficient"
    assert classify(headline(0.2, 0.4, n=MIN_TASKS), k=8)[0] == "improvement"
    n = MIN_TASKS * 2
    k_short = (MIN_SAMPLES - 1) // n
    outcome, reasons = classify(headline(0.2, 0.4, n=n), k=k_short)
    assert outcome == "insufficient" and "paired samples" in reasons[0]
    assert classify(headline(0.2, 0.4, n=n), k=-(-MIN_SAMPLES // n))[0] == "improvement"


def test_up_with_a_significantly_worse_stratum_is_mixed():
    strata = {"easy": stratum(0.1, 0.3), "hard": stratum(-0.3, -0.01)}
    outcome, reasons = classify(headline(0.01, 0.2, strata=strata), k=8)
    assert outcome == "mixed" and any("hard" in r for r in reasons)


def test_small_strata_do_not_count_as_disagreement():
    strata = {"easy": stratum(0.1, 0.3), "hard": stratum(-0.3, -0.01, n=MIN_STRATUM_TASKS - 1)}
    assert classify(headline(0.01, 0.2, strata=strata), k=8)[0] == "improvement"


def test_up_with_a_new_critical_behavior_finding_is_mixed():
    outcome, reasons = classify(headline(0.01, 0.2), k=8, new_critical=["behavior.echo_trap"])
    assert outcome == "mixed" and "behavior.echo_trap" in reasons[-1]


def test_down_with_a_significantly_better_stratum_is_mixed():
    strata = {"easy": stratum(0.01, 0.3), "hard": stratum(-0.5, -0.2)}
    assert classify(headline(-0.2, -0.01, strata=strata), k=8)[0] == "mixed"
    assert classify(headline(-0.2, -0.01, strata={"hard": strata["hard"]}), k=8)[0] == "regression"


def test_spanning_zero_with_strata_in_opposite_directions_is_mixed():
    strata = {"easy": stratum(0.05, 0.3), "hard": stratum(-0.3, -0.05)}
    assert classify(headline(-0.05, 0.05, strata=strata), k=8)[0] == "mixed"
    assert classify(headline(-0.05, 0.05, strata={"easy": strata["easy"]}), k=8)[0] == "insufficient"


def test_new_critical_findings_only_counts_signal_and_behavior_not_in_parent():
    child = {"findings": [
        {"id": "behavior.echo_trap", "layer": "behavior", "severity": "critical"},
        {"id": "behavior.collapse_one_turn", "layer": "behavior", "severity": "critical"},
        {"id": "version.tampering", "layer": "version", "severity": "critical"},
        {"id": "signal.dead_groups", "layer": "signal", "severity": "warning"},
    ]}
    parent = {"findings": [{"id": "behavior.collapse_one_turn", "layer": "behavior", "severity": "critical"}]}
    assert new_critical_findings(child, parent) == ["behavior.echo_trap"]
    assert new_critical_findings(child, None) == ["behavior.collapse_one_turn", "behavior.echo_trap"]
    assert new_critical_findings(None, parent) == []
