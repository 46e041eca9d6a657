"""The noise floor counts each training once (`evo.loop.runs.replicate_sets`), on lineage records shaped
like a real `evo run`: v2's control trained under seed 0, v4 (a harness revision of v2) shares it and trains
seed 1, and v5 (continue-training from v4 under both seeds) reuses v4's two control runs as its own."""

from __future__ import annotations

import pytest

from evo.harness import stats
from evo.lineage.events import VersionRecord
from evo.loop.runs import replicate_sets


def _rec(name, parents, *events):
    return VersionRecord(name, None, None, "promoted", list(parents), [dict(ev) for ev in events])


def _control(key, run, avg, shared_from=None):
    steps = int(key.split("-")[0].removeprefix("steps"))
    return {"event": "control", "key": key, "steps": steps, "seed": int(key.rsplit("seed", 1)[1]), "run": run,
            "avg_at_k": avg, "shared_from": shared_from}


def _records():
    calibration = [{"event": "replicated", "seed": s, "run": f"v0/replicates/seed-{s}", "avg_at_k": a}
                   for s, a in ((1, 0.62), (2, 0.64), (3, 0.61))]
    return {
        "v0": _rec("v0", [], {"event": "trained", "seed": 0}, {"event": "evaluated", "avg_at_k": 0.63}, *calibration),
        "v2": _rec("v2", ["v0"], {"event": "trained", "seed": 0}, {"event": "evaluated", "avg_at_k": 0.74},
                   _control("steps20-seed0", "controls/v2/steps20-seed0", 0.76)),
        "v4": _rec("v4", ["v2"], {"event": "evaluated", "avg_at_k": 0.74},
                   _control("steps20-seed0", "controls/v4/steps20-seed0", 0.77, shared_from="controls/v2/steps20-seed0"),
                   _control("steps20-seed1", "controls/v4/steps20-seed1", 0.79)),
        "v5": _rec("v5", ["v4"], {"event": "trained", "seed": 0, "from_control": "steps20-seed0"},
                   {"event": "evaluated", "avg_at_k": 0.77},
                   {"event": "replicated", "seed": 1, "run": "v5/replicates/seed-1", "avg_at_k": 0.79}),
    }


def test_each_training_is_in_one_set_only():
    sets = [s for s in replicate_sets(_records()) if len(s) >= 2]
    # The calibration set of v0, and seeds 0 and 1 of the v2/v4 continuation once (not also as v4's control set).
    assert sorted(sorted(v for v, _ in s) for s in sets) == [[0.61, 0.62, 0.63, 0.64], [0.77, 0.79]]
    noise = stats.seed_noise(replicate_sets(_records()))
    assert noise.df == 3 + 1 and noise.runs == 6
    spread = [0.61, 0.62, 0.63, 0.64]
    mean = sum(spread) / 4
    expected = (sum((v - mean) ** 2 for v in spread) + 2 * 0.01 ** 2) / 4
    assert noise.sigma == pytest.approx(expected ** 0.5)


def test_an_unshared_control_set_counts_in_full():
    records = _records()
    for rec in ("v4", "v5"):
        del records[rec]
    records["v2"].events.append(_control("steps20-seed1", "controls/v2/steps20-seed1", 0.70))
    sets = [sorted(v for v, _ in s) for s in replicate_sets(records) if len(s) >= 2]
    assert sorted(sets) == [[0.61, 0.62, 0.63, 0.64], [0.70, 0.76]]


def test_a_share_of_a_share_is_counted_once():
    """v2 trained its control under seeds 0 and 1; v4, a harness revision of v2, shares both; v6, a harness
    revision of v4, shares v4's, which the control event records as the runs that trained them (v2's). One
    set, not three."""
    pair = [("steps20-seed0", 0.76), ("steps20-seed1", 0.70)]
    records = {
        "v2": _rec("v2", ["v0"], {"event": "trained", "seed": 0}, {"event": "evaluated", "avg_at_k": 0.74},
                   *[_control(k, f"controls/v2/{k}", a) for k, a in pair]),
        "v4": _rec("v4", ["v2"], {"event": "evaluated", "avg_at_k": 0.74},
                   *[_control(k, f"controls/v4/{k}", a, shared_from=f"controls/v2/{k}") for k, a in pair]),
        "v6": _rec("v6", ["v4"], {"event": "evaluated", "avg_at_k": 0.74},
                   *[_control(k, f"controls/v6/{k}", a, shared_from=f"controls/v2/{k}") for k, a in pair]),
    }
    assert stats.seed_noise(replicate_sets(records)).df == 1


def test_a_version_run_reused_from_an_earlier_version_counts_once():
    """v6 makes v2's change again under train_seeds 2 (a re-test under more evaluation samples): both its runs
    are v2's runs reused (`shared_from`), so the set it forms is the set v2 already holds, counted once."""
    records = _records()
    records["v2"].events.append({"event": "replicated", "seed": 1, "run": "v2/replicates/seed-1", "avg_at_k": 0.70})
    records["v6"] = _rec("v6", ["v0"], {"event": "trained", "seed": 0, "shared_from": "v2"},
                         {"event": "evaluated", "avg_at_k": 0.75},
                         {"event": "replicated", "seed": 1, "run": "v6/replicates/seed-1", "avg_at_k": 0.71,
                          "shared_from": "v2/replicates/seed-1"})
    sets = sorted(sorted(v for v, _ in s) for s in replicate_sets(records) if len(s) >= 2)
    assert [0.70, 0.74] in sets or [0.71, 0.75] in sets
    assert not ([0.70, 0.74] in sets and [0.71, 0.75] in sets), sets
    assert stats.seed_noise(replicate_sets(records)).runs == 8  # v0's four, v2's two, the continuation's two
