"""When the loop stops: only on a measured plateau (gain within the noise floor, reward curve flat).

An inconclusive continuation (its gain above the floor, or the reward still
rising, but its interval spanning 0) is measured again under one more seed
rather than read as a plateau; a control that beat its parent is kept.
"""

from __future__ import annotations

import pytest

from evo.loop import propose

RECIPE = {"grpo": {"steps": 10}}


def _measured(monkeypatch, **figure):
    last = {"via": "v2", "steps": None, "seeds": 1, "outcome": "insufficient", "delta": 0.058, "ci_low": -0.001,
            "ci_high": 0.117, "noise_floor": 0.043, "value": 0.6, "time": "2026-12-01T00:00:00Z", **figure}
    monkeypatch.setattr(propose.V, "continuations", lambda records, name: [last])


def _decide(slope_t=None):
    diagnosis = {"metrics": {} if slope_t is None else {"signal/reward_slope_t": slope_t}}
    return propose._plateau_or_measure(None, "v4", "v3", RECIPE, {}, diagnosis, {})


def test_an_inconclusive_gain_above_the_floor_is_measured_again_under_one_more_seed(monkeypatch):
    _measured(monkeypatch)
    out = _decide(slope_t=0.5)
    assert out["status"] == "proposed"
    manifest = out["manifests"][0]
    assert manifest["kind"] == "continue" and manifest["seeds"] == 2 and "Inconclusive" in manifest["hypothesis"]
    _measured(monkeypatch, seeds=3)
    assert _decide()["manifests"][0]["seeds"] == 4


def test_a_gain_within_the_floor_on_a_flat_curve_is_a_plateau(monkeypatch):
    _measured(monkeypatch, delta=0.01, ci_low=-0.03, ci_high=0.05)
    out = _decide(slope_t=0.4)
    assert out["status"] == "nothing" and out["reason"].startswith("plateau measured")
    assert "noise floor ±0.0430" in out["reason"] and "flat within its noise" in out["reason"]


@pytest.mark.parametrize("slope_t, status", [(3.1, "proposed"), (-2.5, "nothing")])
def test_a_reward_still_rising_is_not_a_plateau_even_within_the_floor(monkeypatch, slope_t, status):
    _measured(monkeypatch, delta=0.01, ci_low=-0.03, ci_high=0.05)
    assert _decide(slope_t=slope_t)["status"] == status


def test_measuring_again_stops_at_the_seed_limit(monkeypatch):
    _measured(monkeypatch, seeds=propose.MAX_MEASURE_SEEDS)
    assert _decide()["status"] == "nothing"


def test_a_control_that_beat_its_parent_is_kept_as_a_version(monkeypatch):
    _measured(monkeypatch, via="control steps10-seed0 of v3", outcome="improvement", delta=0.09, ci_low=0.04)
    out = _decide()
    assert out["status"] == "proposed" and "seeds" not in out["manifests"][0]
