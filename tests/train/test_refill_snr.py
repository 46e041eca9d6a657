"""Dynamic-sampling refill and the SNR filter: unit rules, then real training on the embedded default.

At temperature 0.8 the tiny policy leaves half to two thirds of its groups dead
(every sample right, or every sample wrong), which is the recipe refill is for.
"""

import dataclasses
import json
import math
import os
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest

from evo.errors import ConfigError
from evo.train.cost import estimate_cost
from evo.train.filters import FilterConfig, snr_decisions, snr_loss_scale
from evo.train.records import read_metrics
from evo.train.run import train_recipe

from .conftest import small_recipe


def _snr(**kw):
    return dataclasses.replace(FilterConfig.from_recipe(None), snr=True, **{f"snr_{k}": v for k, v in kw.items()})


def test_snr_keeps_the_highest_spread_groups_until_they_hold_top_p():
    spreads = [0.5, 0.1, 0.3, 0.0, 0.2]
    reasons = snr_decisions(spreads, [True] * 5, _snr(top_p=0.7))
    # ranked 0.5, 0.3, 0.2, 0.1 (total 1.1): 0.5 + 0.3 = 0.8 >= 0.77 holds 70%; the rest go, with their rank
    assert reasons[0] == reasons[2] == ""
    assert reasons[3] == "snr: zero spread (include_zero: false)"
    assert reasons[4] == "snr: spread 0.2 below the top_p 0.7 cut (rank 3 of 4, kept down to 0.3)"
    assert reasons[1].startswith("snr: spread 0.1 below the top_p 0.7 cut (rank 4 of 4")
    # a group an earlier filter dropped is not ranked and keeps its own reason
    assert snr_decisions(spreads, [False, True, True, True, True], _snr(top_p=0.7))[0] == ""
    assert snr_decisions(spreads, [True] * 5, _snr(top_p=1.0)) == ["", "", "", "snr: zero spread (include_zero: false)", ""]
    assert snr_decisions(spreads, [True] * 5, _snr(top_p=1.0, include_zero=True)) == [""] * 5
    # include_zero keeps a dead group a candidate, but no share of spread ever needs it
    assert snr_decisions(spreads, [True] * 5, _snr(top_p=0.7, include_zero=True))[3].startswith("snr: spread 0 below")


def test_snr_loss_scaling_of_the_kept_ratio():
    assert snr_loss_scale(2, 8, "none") == 1.0
    assert snr_loss_scale(2, 8, "linear") == 0.25
    assert snr_loss_scale(2, 8, "sqrt") == 0.5
    with pytest.raises(ConfigError, match="filters.snr.loss_scaling: 'cube'"):
        snr_loss_scale(2, 8, "cube")


def test_refill_needs_the_std_group_filter():
    with pytest.raises(ConfigError, match=r"filters.std_group.refill: true needs the StdGroupFilter"):
        FilterConfig.from_recipe({"std_group": {"enabled": False, "refill": True}})


def dead_recipe(**overrides):
    """Many dead groups: the embedded default sampled at temperature 0.8, with refill."""
    return small_recipe(**{"seed": 0, "rollout.temperature": 0.8, "filters.std_group.enabled": True,
                           "filters.std_group.refill": True, "filters.std_group.max_generation_batches": 4,
                           "grpo.steps": 2, "grpo.checkpoint_every": 1, **overrides})


@pytest.fixture(scope="module")
def refilled(tmp_path_factory):
    out = tmp_path_factory.mktemp("refill") / "run"
    train_recipe(dead_recipe(), out, progress=False)
    return out


def _groups(rows):
    by = {}
    for r in rows:
        by.setdefault((r["step"], r["group"]), []).append(r)
    return by


def test_refill_trains_a_full_batch_of_live_groups_and_records_every_batch(refilled):
    rows = pq.read_table(refilled / "rollouts.parquet").to_pylist()
    metrics = read_metrics(refilled / "metrics.jsonl")
    assert [m["signal/live_groups"] for m in metrics] == [4, 4]
    batches = [m["signal/generation_batches"] for m in metrics]
    assert max(batches) > 1 and all(b <= 4 for b in batches)  # dead groups were replaced by fresh prompts
    assert not any(m["signal/refill_capped"] for m in metrics)
    for step, count in enumerate(batches):
        mine = [r for r in rows if r["step"] == step]
        assert len(mine) == count * 4 * 4  # every trajectory of every batch is on record
        assert sorted({r["generation_batch"] for r in mine}) == list(range(count))
        live = {g for (s, g), rs in _groups(mine).items() if any(r["kept"] and not r["masked"] for r in rs)}
        assert len(live) == 4  # prompts_per_step live groups train
        for (_, g), rs in _groups(mine).items():
            if g not in live:
                assert all(r["filter_reason"].startswith(("std_group: spread", "refill: surplus, the step already holds"))
                           for r in rs)
                assert all(r["advantage"] == 0.0 for r in rs)  # exactly, not a float residue
        assert len({r["task_id"] for r in mine}) == count * 4  # later batches draw fresh prompts
    # the first batch of each step is the one a run without refill draws
    plain = small_recipe(**{"seed": 0, "rollout.temperature": 0.8, "filters.std_group.enabled": True, "grpo.steps": 2})
    assert estimate_cost(dead_recipe())["tokens_generated"] == 4 * estimate_cost(plain)["tokens_generated"]
    assert estimate_cost(dead_recipe())["tokens_trained"] == estimate_cost(plain)["tokens_trained"]


def test_the_cap_is_honoured_and_a_short_step_says_so(refilled, tmp_path):
    out = tmp_path / "capped"
    train_recipe(dead_recipe(**{"filters.std_group.max_generation_batches": 2}), out, progress=False)
    metrics = read_metrics(out / "metrics.jsonl")
    assert all(m["signal/generation_batches"] <= 2 for m in metrics)
    short = [m for m in metrics if m["signal/live_groups"] < 4]
    assert short and all(m["signal/refill_capped"] == 1 and m["signal/generation_batches"] == 2 for m in short)
    rows = pq.read_table(out / "rollouts.parquet").to_pylist()
    first = pq.read_table(refilled / "rollouts.parquet").to_pylist()
    # the same recipe up to the cap: the batches it sampled are the uncapped run's first two of step 0
    step0 = lambda rs: [(r["task_id"], r["completion"]) for r in rs if r["step"] == 0 and r["generation_batch"] < 2]  # noqa: E731
    assert step0(rows) == step0(first)


KILL_MID_REFILL = textwrap.dedent('''
    import json, os, sys
    import evo.train.step_batch as sb
    from evo.train.run import train_recipe

    generate = sb.StepSampler._generate

    def dying(self, schedule, batch, used, policy, generating):
        if schedule == 1 and batch == 1:  # step 1 has checkpointed step 0; its first refill batch
            os.kill(os.getpid(), 9)
        return generate(self, schedule, batch, used, policy, generating)

    sb.StepSampler._generate = dying
    train_recipe(json.loads(open(sys.argv[1]).read()), sys.argv[2], progress=False)
''')


def test_a_run_killed_mid_refill_resumes_to_the_uninterrupted_run(refilled, tmp_path):
    import torch
    from safetensors.torch import load_file

    # The killed run trains step 0 with this process's thread count: the same reduction order bit for bit.

    assert read_metrics(refilled / "metrics.jsonl")[1]["signal/generation_batches"] > 1  # step 1 does refill
    recipe = dead_recipe()
    (tmp_path / "recipe.json").write_text(json.dumps(recipe))
    (tmp_path / "kill.py").write_text(KILL_MID_REFILL)
    out = tmp_path / "resumed"
    proc = subprocess.run([sys.executable, str(tmp_path / "kill.py"), str(tmp_path / "recipe.json"), str(out)],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert json.loads((out / "checkpoint" / "trainer_state.json").read_text())["step"] == 1
    assert not (out / "summary.json").exists()

    summary = train_recipe(recipe, out, progress=False).summary
    assert summary["resumed_from_step"] == 1
    straight, resumed = (load_file(str(o / "checkpoint" / "model.safetensors")) for o in (refilled, out))
    assert all(bool((straight[k] == resumed[k]).all()) for k in straight)
    assert pq.read_table(refilled / "rollouts.parquet").equals(pq.read_table(out / "rollouts.parquet"))
    strip = lambda ms: [{k: v for k, v in m.items() if not k.startswith("time/")} for m in ms]  # noqa: E731
    assert strip(read_metrics(refilled / "metrics.jsonl")) == strip(read_metrics(out / "metrics.jsonl"))


def test_snr_filter_trains_only_the_highest_spread_groups(tmp_path):
    out = tmp_path / "snr"
    recipe = small_recipe(**{"seed": 0, "grpo.steps": 2, "rollout.prompts_per_step": 6,
                             "filters.snr": {"enabled": True, "top_p": 0.6, "loss_scaling": "linear"}})
    train_recipe(recipe, out, progress=False)
    rows = pq.read_table(out / "rollouts.parquet").to_pylist()
    metrics = read_metrics(out / "metrics.jsonl")
    for step, m in enumerate(metrics):
        groups = {g: rs for (s, g), rs in _groups(rows).items() if s == step}
        spread = {g: math.sqrt(sum((r["reward"] - sum(x["reward"] for x in rs) / len(rs)) ** 2 for r in rs) / len(rs))
                  for g, rs in groups.items()}
        kept = [g for g, rs in groups.items() if rs[0]["kept"]]
        dropped = [g for g, rs in groups.items() if not rs[0]["kept"]]
        assert kept and all(groups[g][0]["filter_reason"].startswith("snr: ") for g in dropped)
        assert min(spread[g] for g in kept) >= max((spread[g] for g in dropped), default=0.0)
        # the kept ratio is over every group the filter saw, dead ones included (RAGEN's kept / groups)
        assert m["signal/snr_kept_ratio"] == pytest.approx(len(kept) / len(groups))
        scale = m["signal/snr_loss_scale"]
        assert scale == pytest.approx(len(kept) / len(groups))
        for g in kept:  # linear loss scaling: the stored advantages are the group-normalised ones x kept ratio
            rs = groups[g]
            mean = sum(r["reward"] for r in rs) / len(rs)
            for r in rs:
                assert r["advantage"] == pytest.approx((r["reward"] - mean) / (spread[g] + 1e-6) * scale)
