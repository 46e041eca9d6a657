"""When the loop stops: only on a measured plateau (the continuation's interval below one seed's noise floor,
the reward curve flat).

An inconclusive continuation is measured again with more power rather than
read as a plateau: for twice the steps when its gain points up (or the reward
still rises), else under one more seed; a control that beat its parent is kept.
"""

from __future__ import annotations

import pytest

from evo.loop import propose

RECIPE = {"grpo": {"steps": 10}}


def _measured(monkeypatch, behind=80, **figure):
    last = {"via": "v2", "steps": 10, "seeds": 1, "outcome": "insufficient", "delta": 0.058, "ci_low": -0.001,
            "ci_high": 0.117, "noise_floor": 0.043, "value": 0.6, "time": "2026-12-01T00:00:00Z", **figure}
    monkeypatch.setattr(propose.V, "continuations", lambda records, name: [last])
    monkeypatch.setattr(propose.V, "schedule_end", lambda records, name: behind)


def _decide(slope_t=None):
    diagnosis = {"metrics": {} if slope_t is None else {"signal/reward_slope_t": slope_t}}
    return propose._plateau_or_measure(None, "v4", "v3", RECIPE, {}, diagnosis, {})


def _manifest(out):
    assert out["status"] == "proposed", out
    manifest = out["manifests"][0]
    assert manifest["kind"] == "continue" and "Inconclusive" in manifest["hypothesis"]
    return manifest


def test_an_inconclusive_gain_that_points_up_is_measured_again_for_twice_the_steps(monkeypatch):
    _measured(monkeypatch)
    manifest = _manifest(_decide(slope_t=0.5))
    assert manifest["steps"] == 20 and "seeds" not in manifest and "for 20 more steps" in manifest["change"]
    _measured(monkeypatch, steps=20, delta=0.01, ci_low=-0.05, ci_high=0.07)
    assert _manifest(_decide())["steps"] == 40


def test_a_continuation_goes_no_longer_than_the_policy_has_trained_then_adds_seeds(monkeypatch):
    _measured(monkeypatch, behind=10)
    manifest = _manifest(_decide())
    assert manifest["seeds"] == 2 and "steps" not in manifest
    _measured(monkeypatch, behind=40, steps=40, seeds=3)
    assert _manifest(_decide())["seeds"] == 4


def test_a_gain_that_does_not_point_up_is_measured_under_one_more_seed(monkeypatch):
    _measured(monkeypatch, delta=-0.004, ci_low=-0.063, ci_high=0.055)
    manifest = _manifest(_decide(slope_t=0.3))
    assert manifest["seeds"] == 2 and "steps" not in manifest


def test_a_wide_interval_around_a_small_gain_is_not_a_plateau(monkeypatch):
    # The old rule stopped here (gain within the floor, flat curve); the interval still allows +0.087
    _measured(monkeypatch, delta=0.029, ci_low=-0.031, ci_high=0.087, noise_floor=0.058)
    assert _decide(slope_t=0.4)["status"] == "proposed"


def test_an_interval_below_one_seeds_floor_on_a_flat_curve_is_a_plateau(monkeypatch):
    # two seeds: the recorded floor is one seed's / sqrt(2), so one seed's is 0.043 * 1.414 = 0.061
    _measured(monkeypatch, seeds=2, delta=0.01, ci_low=-0.03, ci_high=0.05)
    out = _decide(slope_t=0.4)
    assert out["status"] == "nothing" and out["reason"].startswith("plateau measured"), out
    assert "noise floor ±0.0430" in out["reason"] and "flat within its noise" in out["reason"]
    assert out["plateau"]["margin"] == pytest.approx(0.043 * 2 ** 0.5)
    _measured(monkeypatch, seeds=1, delta=0.01, ci_low=-0.03, ci_high=0.05)  # one seed: 0.05 > 0.043
    assert _decide(slope_t=0.4)["status"] == "proposed"


@pytest.mark.parametrize("slope_t, status", [(3.1, "proposed"), (-2.5, "nothing")])
def test_a_reward_still_rising_is_not_a_plateau_even_below_the_floor(monkeypatch, slope_t, status):
    _measured(monkeypatch, seeds=2, delta=0.01, ci_low=-0.03, ci_high=0.05)
    assert _decide(slope_t=slope_t)["status"] == status


def test_measuring_again_stops_at_the_seed_limit_and_says_the_plateau_was_not_established(monkeypatch):
    _measured(monkeypatch, behind=10, seeds=propose.MAX_MEASURE_SEEDS, noise_floor=0.01)  # one seed: 0.04
    out = _decide()
    assert out["status"] == "nothing" and out["reason"].startswith("measuring limit reached, plateau not established")


def test_a_control_that_beat_its_parent_is_kept_as_a_version_of_its_length(monkeypatch):
    _measured(monkeypatch, via="control steps20-seed0 of v3", steps=20, outcome="improvement", delta=0.09,
              ci_low=0.04)
    out = _decide()
    assert out["status"] == "proposed"
    manifest = out["manifests"][0]
    assert "seeds" not in manifest and manifest["steps"] == 20 and "Keep that continuation" in manifest["hypothesis"]


def test_the_equivalence_margin_counts_the_task_sampling_term(monkeypatch):
    # one seed: floor 0.043 and a task-sampling half-width 0.04 give one version's verdict ±0.0587
    _measured(monkeypatch, behind=10, delta=0.0, ci_low=-0.06, ci_high=0.06, boot_ci_high=0.04)
    assert _decide()["status"] == "proposed"  # 0.06 > 0.0587: not yet
    _measured(monkeypatch, behind=10, seeds=2, noise_floor=0.043 / 2 ** 0.5, delta=0.0, ci_low=-0.05, ci_high=0.05,
              boot_ci_high=0.03)
    out = _decide()
    assert out["status"] == "nothing" and out["plateau"]["margin"] == pytest.approx((0.043 ** 2 + 0.03 ** 2) ** 0.5)


def test_the_reward_curve_is_the_continuations_own_not_the_parents(monkeypatch, tmp_path):
    import json
    from types import SimpleNamespace

    run = tmp_path / ".evo/artifacts/controls/v3/steps10-seed0"
    run.mkdir(parents=True)
    (run / "diagnosis.json").write_text(json.dumps({"metrics": {"signal/reward_slope_t": 0.2}}))
    ws = SimpleNamespace(root=tmp_path, settings={"artifacts": {"root": ".evo/artifacts"}})
    _measured(monkeypatch, seeds=2, delta=0.01, ci_low=-0.03, ci_high=0.05, run="controls/v3/steps10-seed0")
    rising_parent = {"metrics": {"signal/reward_slope_t": 3.5}}
    out = propose._plateau_or_measure(ws, "v4", "v3", RECIPE, {}, rising_parent, {})
    assert out["status"] == "nothing" and "slope t = 0.2" in out["reason"], out  # the parent's 3.5 would never stop


def test_a_collapsed_parent_is_not_continued_to_measure_a_plateau(monkeypatch):
    """calc at ten times the default learning rate: v0 collapsed with every recent group dead. Continuing it
    unchanged trained 20 steps at 0.000 (no gradient in a dead group); the loop says so and stops instead."""
    from types import SimpleNamespace

    veto = {"audit": "collapse", "message": "collapse (dead_groups): 100% of 112 recent groups have no reward spread"}
    judged = {"event": "judged", "vetoes": [veto]}
    records = {"v0": SimpleNamespace(parents=[], last=lambda event: judged if event == "judged" else None)}
    monkeypatch.setattr(propose.V, "continuations", lambda records, name: [])
    out = propose._plateau_or_measure(None, "v1", "v0", RECIPE, records, {"metrics": {}}, {})
    assert out["status"] == "nothing" and "v0's policy collapsed (collapse (dead_groups): 100%" in out["reason"]
    judged["vetoes"] = []  # the same parent, not vetoed: its continuation is measured
    assert _manifest_first(propose._plateau_or_measure(None, "v1", "v0", RECIPE, records, {"metrics": {}}, {}))


def _manifest_first(out):
    assert out["status"] == "proposed", out
    return out["manifests"][0]["kind"] == "continue"


# ------------------------------------------------------- measuring an inconclusive candidate again
def _records(**headline):
    from evo.lineage.events import VersionRecord

    manifest = {"kind": "policy", "factor": "grpo.learning_rate", "change": "grpo.learning_rate: 0.0005 -> 0.0002"}
    v1 = VersionRecord("v1", None, None, "active", ["v0"], [{"event": "created", "intervention": manifest}])
    last = {"version": "v1", "outcome": "insufficient", "seeds": 1, "vetoes": [], "attributed": {"against": "control"},
            "headline": {"delta": 0.06, "ci_low": -0.17, "ci_high": 0.29, "boot_ci_low": 0.04, "boot_ci_high": 0.08,
                         **headline}}
    return {"v1": v1}, last, manifest


@pytest.mark.parametrize("why, change", [
    ("the gain is not positive", {"headline": {"delta": -0.01, "boot_ci_low": -0.03}}),
    ("task sampling alone does not resolve it", {"headline": {"boot_ci_low": -0.001}}),
    ("it was not inconclusive", {"outcome": "regression"}),
    ("it was vetoed", {"vetoes": [{"audit": "collapse"}]}),
    ("it had no control", {"attributed": {"against": "v0"}}),
    ("it was already measured again", {"manifest": {"remeasures": "v0"}}),
    ("it came from another parent", {"parent": "v2"}),
    ("a re-measure of it was proposed already (rejected before a verdict)", {"sibling": True}),
])
def test_a_candidate_is_not_measured_again_when(why, change):
    records, last, manifest = _records(**change.get("headline", {}))
    last.update({k: v for k, v in change.items() if k not in ("headline", "manifest", "parent", "sibling")})
    manifest.update(change.get("manifest", {}))
    if change.get("sibling"):
        from evo.lineage.events import VersionRecord

        records["v2"] = VersionRecord("v2", None, None, "pruned", ["v0"],
                                      [{"event": "created", "intervention": {**manifest, "remeasures": "v1"}}])
    # Every refusal is decided from the lineage before the workspace is touched (ws None would raise).
    assert propose._remeasure(None, "v3", change.get("parent", "v0"), {}, records, last, None) is None, why
