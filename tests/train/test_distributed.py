"""Data-parallel GRPO for real: torchrun, 2 CPU processes on the gloo backend, against the 1-process run.

Each launch starts two Python processes that import torch and transformers,
so these tests share their runs through module-scoped fixtures and keep the
recipes tiny (4 prompts x 4 samples, 1-3 steps).

A rank samples its groups exactly as one process would, up to float rounding:
the logits of a row differ by ~1e-7 between batch shapes (a matmul over 2
rows or 4), so a token whose uniform falls that close to a boundary of the
cumulative distribution flips. That is rare (0 of 4,617 tokens over 40 seeds
of a 2-way shard of this domain) but the shared small recipe's seed 3 has one:
its step-0 group 2 sample 0 draws u = 0.874930757 against a boundary at
0.874930808 and samples 'G' instead of 'F' on rank 0. These tests use seed 0.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest
import yaml

from evo.errors import TrainError
from evo.train.launch import run_training
from evo.train.records import read_metrics
from evo.train.run import train_recipe

from .conftest import small_recipe

STATS = ("kl", "entropy", "clip_frac_low", "clip_frac_high")  # float statistics of a forward: equal to 1e-5


def _weights(out):
    from safetensors.torch import load_file

    return load_file(str(out / "checkpoint" / "model.safetensors"))


def _max_diff(a, b) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _without_nulls(data):
    """A normalised recipe written back as YAML: unset options (None) are left out, as a user writes it."""
    if isinstance(data, dict):
        return {k: _without_nulls(v) for k, v in data.items() if v is not None}
    return data


def dp_recipe(**overrides):
    return small_recipe(**{"seed": 0, "grpo.steps": 1, **overrides})


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "run"
    train_recipe(dp_recipe(), out, version="v1", progress=False)
    return out


@pytest.fixture(scope="module")
def two_ranks_ddp(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp") / "run"
    run_training(dp_recipe(), out, version="v1", progress=False, nproc=2)
    return out


def test_two_ranks_train_exactly_the_one_rank_step(one_rank, two_ranks_ddp):
    """Same initial checkpoint and prompts: the DDP step, its records, metrics and Avg@k are the 1-rank run's."""
    assert _max_diff(_weights(one_rank), _weights(two_ranks_ddp)) <= 1e-5
    base = _weights(one_rank)
    from evo.train.policy import load_policy

    start = load_policy("builtin:tiny-char").model.state_dict()
    assert max(float((base[k] - start[k]).abs().max()) for k in base) > 1e-4, "the step moved no parameter"

    rows1 = pq.read_table(one_rank / "rollouts.parquet").to_pylist()
    rows2 = pq.read_table(two_ranks_ddp / "rollouts.parquet").to_pylist()
    assert len(rows2) == 4 * 4 and len({r["traj_id"] for r in rows2}) == len(rows2)  # every trajectory once
    assert {r["rank"] for r in rows2} == {0, 1} and {r["rank"] for r in rows1} == {0}
    rank_of_group = {}
    for r in rows2:
        assert rank_of_group.setdefault(r["group"], r["rank"]) == r["rank"], "a group spans two ranks"
    assert sorted(rank_of_group) == [0, 1, 2, 3]
    for a, b in zip(rows1, rows2):
        assert {k: v for k, v in a.items() if k not in STATS + ("rank",)} == \
               {k: v for k, v in b.items() if k not in STATS + ("rank",)}
        for k in STATS:
            assert a[k] == pytest.approx(b[k], abs=1e-5), k

    (m1,), (m2,) = read_metrics(one_rank / "metrics.jsonl"), read_metrics(two_ranks_ddp / "metrics.jsonl")
    assert m1.keys() == m2.keys()
    # Only ranks reduce gradients; the reduction is part of the update, the wait for the other rank never negative.
    assert m1["time/sync_s"] == m1["time/rank_wait_s"] == 0 and m2["time/sync_s"] > 0
    assert m2["time/sync_s"] <= m2["time/train_s"] and m2["time/rank_wait_s"] >= 0
    for k in m1:
        if not k.startswith(("time/", "dist/")):
            assert m1[k] == pytest.approx(m2[k], rel=1e-4, abs=1e-6), k

    e1, e2 = (json.loads((o / "eval.json").read_text()) for o in (one_rank, two_ranks_ddp))
    assert {k: v for k, v in e1.items() if k != "model"} == {k: v for k, v in e2.items() if k != "model"}
    assert pq.read_table(one_rank / "eval.parquet").equals(pq.read_table(two_ranks_ddp / "eval.parquet"))
    assert sorted(p.name for p in two_ranks_ddp.iterdir()) == sorted(p.name for p in one_rank.iterdir())


@pytest.mark.parametrize("overrides", [
    {"seed": 4},  # one dead group: one process would otherwise pack groups 0, 2 and 3 densely
    {"seed": 5, "grpo.micro_batch_size": 3, "grpo.steps": 2},  # every group live, several micro-batches a rank
], ids=["dead-group", "micro-batches"])
def test_two_ranks_reproduce_the_one_rank_update_at_other_seeds(tmp_path, overrides):
    """Not one lucky seed: one process sums the micro-batches each rank computes, in the order the ranks do.

    Without segments (`evo.train.forward.micro_batches`) these runs differ by
    2.8e-4 and 5.8e-5 (up to 14% of the learning rate): AdamW's first step
    divides each gradient by its own size, so where a gradient nearly cancels,
    the rounding of a differently shaped micro-batch becomes a visible move.
    """
    recipe = dp_recipe(**overrides)
    one, two = tmp_path / "one", tmp_path / "two"
    train_recipe(recipe, one, version="v1", progress=False)
    run_training(recipe, two, version="v1", progress=False, nproc=2)
    assert _max_diff(_weights(one), _weights(two)) <= 1e-6


def test_groups_moved_between_ranks_to_balance_the_update_still_train_the_one_rank_step(tmp_path):
    """`evo.train.balance`: a rank trains groups the other sampled; the update, the rows and their sampling ranks
    are what they would be without the move.

    Moved groups are prefilled in other batch shapes and summed in another
    order, and Adam's first step divides gradients of ~1e-9 by denominators of
    about its eps, which turns their rounding into a few percent of those
    elements' small updates: 1.5e-5 at most on 4 of the model's elements here
    (micro-batches of 8 instead of 64 in one process alone give 5e-6), and 76
    of its 866,048 elements differ by more than 1e-6. So the bounds are 5e-5
    on the largest difference and 1e-6 on all but 0.1% of the elements;
    advantages 1.5x too large on the moved rows give 4e-3.
    """
    recipe = dp_recipe(**{"rollout.prompts_per_step": 8, "grpo.micro_batch_size": 8, "grpo.balance_ranks": True})
    one, two = tmp_path / "one", tmp_path / "two"
    train_recipe(recipe, one, version="v1", progress=False)
    run_training(recipe, two, version="v1", progress=False, nproc=2)
    (m1,), (m2,) = read_metrics(one / "metrics.jsonl"), read_metrics(two / "metrics.jsonl")
    assert m1["dist/moved_groups"] == 0 and m2["dist/moved_groups"] > 0 and 0 < m2["dist/balance_gain"] < 1
    w1, w2 = _weights(one), _weights(two)
    assert _max_diff(w1, w2) <= 5e-5
    apart = sum(int(((w1[k] - w2[k]).abs() > 1e-6).sum()) for k in w1)
    assert apart <= 1e-3 * sum(w.numel() for w in w1.values()), apart
    rows1 = pq.read_table(one / "rollouts.parquet").to_pylist()
    rows2 = pq.read_table(two / "rollouts.parquet").to_pylist()
    assert [r["rank"] for r in rows2] == [r["group"] % 2 for r in rows2]  # the rank that sampled it, moved or not
    for a, b in zip(rows1, rows2):
        assert {k: v for k, v in a.items() if k not in STATS + ("rank",)} == \
               {k: v for k, v in b.items() if k not in STATS + ("rank",)}
        for k in STATS:
            assert a[k] == pytest.approx(b[k], abs=1e-5), k
    for k in m1:
        if not k.startswith(("time/", "dist/")):
            assert m1[k] == pytest.approx(m2[k], rel=1e-4, abs=1e-6), k


def test_two_ranks_match_one_rank_under_the_trainer_levers(tmp_path):
    """token-mean, sample std, refill and the SNR filter: every count they divide by or rank over is all-reduced."""
    recipe = dp_recipe(**{"grpo.loss_aggregation": "token-mean", "grpo.advantage_std": "sample",
                          "rollout.temperature": 0.8, "filters.std_group.enabled": True,
                          "filters.std_group.refill": True, "filters.std_group.max_generation_batches": 3,
                          "filters.snr": {"enabled": True, "top_p": 0.5, "loss_scaling": "sqrt"}})
    one, two = tmp_path / "one", tmp_path / "two"
    train_recipe(recipe, one, version="v1", progress=False)
    run_training(recipe, two, version="v1", progress=False, nproc=2)
    (m1,), (m2,) = read_metrics(one / "metrics.jsonl"), read_metrics(two / "metrics.jsonl")
    assert m1["signal/generation_batches"] > 1 and m1["signal/snr_kept_ratio"] < 1  # both levers acted
    for k in m1:
        if not k.startswith(("time/", "dist/")):
            assert m1[k] == pytest.approx(m2[k], rel=1e-4, abs=1e-6), k
    rows1 = pq.read_table(one / "rollouts.parquet").to_pylist()
    rows2 = pq.read_table(two / "rollouts.parquet").to_pylist()
    assert {r["rank"] for r in rows2} == {0, 1}
    for a, b in zip(rows1, rows2):
        assert {k: v for k, v in a.items() if k not in STATS + ("rank",)} == \
               {k: v for k, v in b.items() if k not in STATS + ("rank",)}
    assert _max_diff(_weights(one), _weights(two)) <= 1e-5


def test_fsdp2_under_an_outside_torchrun_trains_the_same_step(one_rank, tmp_path):
    """`torchrun ... evo train` (the CLI as each rank) with grpo.fsdp: FSDP2 shards, same update, rank 0 reports."""
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(_without_nulls(dp_recipe(**{"grpo.fsdp": True}))))
    out = tmp_path / "run"
    evo = os.path.join(os.path.dirname(sys.executable), "evo")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           evo, "train", str(path), "--out", str(out), "--version", "v1", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)  # one JSON document: rank 1 printed nothing
    assert summary["steps"] == 1 and summary["checkpoint_dir"] == str(out / "checkpoint")
    assert _max_diff(_weights(one_rank), _weights(out)) <= 1e-5
    rows = pq.read_table(out / "rollouts.parquet").to_pylist()
    assert len(rows) == 16 and {r["rank"] for r in rows} == {0, 1}
    assert json.loads((out / "eval.json").read_text())["avg_at_k"] == \
        json.loads((one_rank / "eval.json").read_text())["avg_at_k"]


def test_fsdp2_in_one_process_shards_over_a_world_of_one(one_rank, tmp_path):
    """What a one-GPU machine runs: the FSDP2 path (gather, one synced backward, DTensor AdamW, gathered save)."""
    out = tmp_path / "run"
    train_recipe(dp_recipe(**{"grpo.fsdp": True}), out, version="v1", progress=False)
    assert _max_diff(_weights(one_rank), _weights(out)) <= 1e-6
    assert read_metrics(out / "metrics.jsonl")[0]["reward/mean"] == read_metrics(one_rank / "metrics.jsonl")[0]["reward/mean"]


SITECUSTOMIZE = textwrap.dedent('''
    """Test-only fault injection into launched ranks: EVO_TEST_FAULT=raise|kill|abort_on_exit:<rank>:<step>."""
    import os

    _plan = os.environ.get("EVO_TEST_FAULT")
    if _plan and os.environ.get("RANK") is not None:
        _kind, _rank, _step = _plan.split(":")
        if int(os.environ["RANK"]) == int(_rank):
            import evo.train.trainer as _t

            if _kind == "abort_on_exit":  # the rank finishes, then dies tearing the process group down
                import evo.train.distributed as _d

                def end_rank(code):
                    import torch.distributed as dist

                    dist.barrier()
                    os.abort()

                _d.end_rank = end_rank
            elif _kind == "raise":
                _run = _t.Trainer.run_step

                def run_step(self, step):
                    if step == int(_step):
                        raise RuntimeError(f"planted fault on rank {_rank} at step {step}")
                    return _run(self, step)

                _t.Trainer.run_step = run_step
            else:
                _save = _t.Trainer.save

                def save(self, done, finished=False):
                    folder = _save(self, done, finished)
                    if done == int(_step):
                        os.kill(os.getpid(), 9)
                    return folder

                _t.Trainer.save = save
''')


def _one_line_and_clean_up(error) -> str:
    """The error's text, checked to be one line; the rank logs it names are removed."""
    line = str(error)
    assert "\n" not in line
    logs = re.search(r"\(rank logs: (\S+)\)$", line)
    assert logs, line
    shutil.rmtree(logs.group(1))
    return line


@pytest.fixture()
def faults(tmp_path, monkeypatch):
    """Plant a fault in the launched ranks (they import this sitecustomize at startup)."""
    folder = tmp_path / "faults"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])))
    return lambda plan: monkeypatch.setenv("EVO_TEST_FAULT", plan)


def test_a_rank_that_raises_fails_the_run_in_one_line(tmp_path, faults):
    faults("raise:1:0")
    out = tmp_path / "run"
    with pytest.raises(TrainError) as err:
        run_training(dp_recipe(), out, progress=False, nproc=2)
    line = _one_line_and_clean_up(err.value)
    assert line.startswith("training rank 1 of 2 failed: RuntimeError: planted fault on rank 1 at step 0")
    assert not (out / "summary.json").exists() and not (out / "checkpoint").exists()


def test_a_rank_that_dies_after_finishing_its_work_leaves_a_finished_run(one_rank, tmp_path, faults):
    """A rank that crashes in process-group teardown, after its done marker, costs nothing: the run is whole."""
    faults("abort_on_exit:1:0")
    out = tmp_path / "run"
    result = run_training(dp_recipe(), out, progress=False, nproc=2)
    assert result.summary == json.loads((out / "summary.json").read_text()) and result.summary
    assert pq.read_table(out / "rollouts.parquet").num_rows == pq.read_table(one_rank / "rollouts.parquet").num_rows
    assert _max_diff(_weights(one_rank), _weights(out)) <= 1e-5


def test_a_killed_two_rank_run_resumes_to_the_uninterrupted_parameters(tmp_path, faults):
    recipe = dp_recipe(**{"grpo.steps": 3, "grpo.checkpoint_every": 1, "grpo.num_iterations": 2,
                          "grpo.kl_coef": 0.05})
    straight = tmp_path / "straight"
    run_training(recipe, straight, progress=False, nproc=2)

    faults("kill:0:2")  # rank 0 is SIGKILLed right after writing the step-2 checkpoint
    resumed = tmp_path / "resumed"
    with pytest.raises(TrainError) as err:
        run_training(recipe, resumed, progress=False, nproc=2)
    line = _one_line_and_clean_up(err.value)
    assert line.startswith("training rank 0 of 2 died without reporting an error (killed by signal 9)"), line
    state = json.loads((resumed / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 2 and state["world_size"] == 2 and not (resumed / "summary.json").exists()

    os.environ.pop("EVO_TEST_FAULT")
    summary = run_training(recipe, resumed, progress=False, nproc=2).summary
    assert summary["resumed_from_step"] == 2
    assert _max_diff(_weights(straight), _weights(resumed)) <= 1e-6
    assert pq.read_table(straight / "rollouts.parquet").drop(list(STATS)).equals(
        pq.read_table(resumed / "rollouts.parquet").drop(list(STATS)))
    assert [m["step"] for m in read_metrics(resumed / "metrics.jsonl")] == [0, 1, 2]


def test_prompts_fewer_than_ranks_is_a_one_line_error(tmp_path):
    with pytest.raises(TrainError) as err:
        run_training(dp_recipe(**{"rollout.prompts_per_step": 1}), tmp_path / "run", progress=False, nproc=2)
    assert "rollout.prompts_per_step: 1 is below the 2 training ranks" in str(err.value)


def test_deepspeed_two_ranks_train_the_one_rank_step_and_resume(tmp_path, faults):
    """grpo.engine: deepspeed (ZeRO-2) under DeepSpeed's own launcher; skipped where deepspeed is not installed."""
    pytest.importorskip("deepspeed")
    recipe = dp_recipe(**{"grpo.engine": "deepspeed"})
    one, two = tmp_path / "one", tmp_path / "two"
    run_training(recipe, one, progress=False, nproc=1)
    run_training(recipe, two, progress=False, nproc=2, launcher="deepspeed")
    assert _max_diff(_weights(one), _weights(two)) <= 1e-5
    assert read_metrics(one / "metrics.jsonl")[0]["reward/mean"] == read_metrics(two / "metrics.jsonl")[0]["reward/mean"]

    longer = dp_recipe(**{"grpo.engine": "deepspeed", "grpo.steps": 2, "grpo.checkpoint_every": 1})
    run_training(longer, tmp_path / "straight", progress=False, nproc=2)
    faults("kill:0:1")
    with pytest.raises(TrainError) as err:
        run_training(longer, tmp_path / "resumed", progress=False, nproc=2)
    _one_line_and_clean_up(err.value)
    assert (tmp_path / "resumed" / "checkpoint" / "deepspeed" / "state").is_dir()  # ZeRO partitions, per rank
    os.environ.pop("EVO_TEST_FAULT")
    assert run_training(longer, tmp_path / "resumed", progress=False, nproc=2).summary["resumed_from_step"] == 1
    assert _max_diff(_weights(tmp_path / "straight"), _weights(tmp_path / "resumed")) <= 1e-6


def test_the_synced_backward_reaches_every_parameter_with_an_exactly_zero_gradient():
    """DDP's one forward (`ZeroReach`): every trainable parameter gets a gradient (DDP requires it), all exactly 0,
    even where a parameter is inf; a frozen one gets none."""
    import torch

    from evo.train.parallel import ZeroReach

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2).to(torch.bfloat16))
    with torch.no_grad():
        model[0].weight[0, 0] = float("inf")
    model[1].bias.requires_grad_(False)
    ZeroReach(model)().backward()
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and p.grad.shape == p.shape and not p.grad.any(), name
        else:
            assert p.grad is None, name
