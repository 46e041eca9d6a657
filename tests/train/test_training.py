"""Real GRPO training on CPU: parameters move, records are faithful, resume is exact."""

import json
import os
import shutil
import signal

import pyarrow.parquet as pq
import pytest
import torch

from evo.domains.arithmetic import ArithmeticEnv, score_completion
from evo.train.engine import TorchEngine
from evo.train.forward import build_batch
from evo.train.policy import load_policy
from evo.train.rewards import total_reward
from evo.train.run import train_recipe
from evo.train.trainer import Trainer
from evo.train.types import Trajectory

from .conftest import small_recipe

CONTRACT_COLUMNS = {
    "traj_id", "version", "step", "group", "sample", "task_id", "stratum", "prompt", "completion",
    "completion_tokens", "num_tokens", "finish_reason", "truncated", "turns", "tool_calls", "tools", "idle_turns", "answer",
    "transcript", "reward", "advantage", "kept", "filter_reason", "masked", "kl", "entropy", "clip_frac_low",
    "clip_frac_high",
}


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_training_moves_parameters_and_records_what_the_reward_function_returns(tmp_path):
    recipe = small_recipe(**{"filters.std_group.enabled": True})
    res = train_recipe(recipe, tmp_path / "run", version="v1", progress=False)
    base = load_policy("builtin:tiny-char").model.state_dict()
    trained = _weights(res.checkpoint_dir)
    moved = [k for k in trained if not torch.equal(trained[k], base[k])]
    assert moved, "no parameter changed after training"

    rows = pq.read_table(res.out_dir / "rollouts.parquet").to_pylist()
    assert len(rows) == 3 * 4 * 4
    assert CONTRACT_COLUMNS | {f"reward/{c}" for c in ArithmeticEnv.reward_components} <= set(rows[0])
    answers = {t.id: t.answer for t in ArithmeticEnv(n_validation=12, n_train=60).tasks("train")}
    for r in rows:
        components, extracted = score_completion(r["completion"], answers[r["task_id"]])
        for name, value in components.items():
            assert r[f"reward/{name}"] == pytest.approx(value)
        assert r["reward"] == pytest.approx(total_reward(components, recipe["reward"]["terms"]))
        assert r["answer"] == extracted
        assert r["version"] == "v1"
        assert r["truncated"] == (r["finish_reason"] == "length")
        if not r["kept"]:
            assert r["filter_reason"].startswith("std_group: spread") and r["advantage"] == 0.0
    assert len({r["traj_id"] for r in rows}) == len(rows)

    metrics = [json.loads(x) for x in (res.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1, 2]
    for key in ("reward/mean", "signal/dead_group_ratio", "signal/reward_std", "policy/clip_frac_low",
                "policy/clip_frac_high", "policy/kl", "policy/entropy", "gen/length_mean", "gen/truncated_frac",
                "reward/partial_credit_mean", "time/step_s"):
        assert key in metrics[0]
    step0 = [r for r in rows if r["step"] == 0]
    assert metrics[0]["reward/mean"] == pytest.approx(sum(r["reward"] for r in step0) / len(step0))

    summary = json.loads((res.out_dir / "summary.json").read_text())
    ev = json.loads((res.out_dir / "eval.json").read_text())
    assert summary["eval"] == ev and summary["recipe_hash"] == res.summary["recipe_hash"]
    assert summary["tokens_generated"] == sum(r["num_tokens"] for r in rows)
    assert ev["k"] == 2 and ev["n_tasks"] == 12
    assert pq.read_table(res.out_dir / "eval.parquet").num_rows == 24
    assert not (res.out_dir / "rollouts.parts").exists()

    # A finished run returns at once without training again.
    before = (res.checkpoint_dir / "model.safetensors").stat().st_mtime_ns
    again = train_recipe(recipe, tmp_path / "run", progress=False)
    assert again.summary == summary
    assert (res.checkpoint_dir / "model.safetensors").stat().st_mtime_ns == before


def test_interrupted_run_resumes_to_the_same_result(tmp_path, monkeypatch):
    recipe = small_recipe(**{"grpo.steps": 4, "grpo.num_iterations": 2, "grpo.kl_coef": 0.05})
    straight = train_recipe(recipe, tmp_path / "straight", progress=False)

    original = Trainer.run_step

    def run_step_then_ctrl_c(self, step):
        metrics = original(self, step)
        if step == 1:
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C does; the run stops after this step
        return metrics

    monkeypatch.setattr(Trainer, "run_step", run_step_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        train_recipe(recipe, tmp_path / "resumed", progress=False)
    state = json.loads((tmp_path / "resumed" / "checkpoint" / "trainer_state.json").read_text())
    assert state["step"] == 2 and not (tmp_path / "resumed" / "summary.json").exists()
    monkeypatch.setattr(Trainer, "run_step", original)
    resumed = train_recipe(recipe, tmp_path / "resumed", progress=False)
    assert resumed.summary["resumed_from_step"] == 2

    a, b = _weights(straight.checkpoint_dir), _weights(resumed.checkpoint_dir)
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6, rtol=0), key
    ra = pq.read_table(straight.out_dir / "rollouts.parquet").drop(["kl", "entropy", "clip_frac_low", "clip_frac_high"])
    rb = pq.read_table(resumed.out_dir / "rollouts.parquet").drop(["kl", "entropy", "clip_frac_low", "clip_frac_high"])
    assert ra.equals(rb)
    strip = lambda ev: {k: v for k, v in ev.items() if k != "model"}  # noqa: E731 (names differ by folder)
    assert strip(straight.summary["eval"]) == strip(resumed.summary["eval"])
    assert straight.summary["tokens_generated"] == resumed.summary["tokens_generated"]


def _tree_digest(folder):
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_finished_run_extended_to_more_steps_is_the_run_trained_that_long(tmp_path):
    from evo.train.run import EXTENDED_FROM, extend_run

    long = small_recipe(**{"grpo.steps": 5, "grpo.num_iterations": 2, "grpo.kl_coef": 0.05, "grpo.warmup_steps": 2})
    short = small_recipe(**{"grpo.steps": 3, "grpo.num_iterations": 2, "grpo.kl_coef": 0.05, "grpo.warmup_steps": 2})
    straight = train_recipe(long, tmp_path / "straight", version="v1", progress=False)
    first = train_recipe(short, tmp_path / "short", version="v0", progress=False)
    before = _tree_digest(first.out_dir)

    assert extend_run(first.out_dir, tmp_path / "extended", long, version="v1") == 3
    extended = train_recipe(long, tmp_path / "extended", version="v1", progress=False)
    assert extended.summary["resumed_from_step"] == 3 and extended.summary["steps"] == 5
    a, b = _weights(straight.checkpoint_dir), _weights(extended.checkpoint_dir)
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6, rtol=0), key
    drop = ["kl", "entropy", "clip_frac_low", "clip_frac_high"]
    ra = pq.read_table(straight.out_dir / "rollouts.parquet").drop(drop)
    rb = pq.read_table(extended.out_dir / "rollouts.parquet").drop(drop)
    assert ra.equals(rb)  # every step's trajectories, the three it was given and the two it trained, named v1
    assert [m["step"] for m in map(json.loads, (extended.out_dir / "metrics.jsonl").read_text().splitlines())] == list(range(5))
    assert straight.summary["tokens_generated"] == extended.summary["tokens_generated"]
    assert json.loads((extended.out_dir / EXTENDED_FROM).read_text())["steps"] == 3
    assert _tree_digest(first.out_dir) == before  # the shorter run is evidence too: never written


def test_a_run_from_a_checkpoint_continues_its_optimizer_as_the_run_trained_on_would(tmp_path):
    """A version trains on from its parent's checkpoint with the parent's AdamW moments, so
    3 steps + 2 more from the checkpoint (prompts after the first 3) is the 5-step run; a
    weights-only copy of the same checkpoint starts a fresh optimizer and lands elsewhere.
    (No KL term: its reference is each run's own starting point.)"""
    def recipe(steps):
        return small_recipe(**{"grpo.steps": steps, "grpo.kl_coef": 0.0})

    straight = train_recipe(recipe(5), tmp_path / "straight", progress=False)
    parent = train_recipe(recipe(3), tmp_path / "parent", progress=False)
    child = train_recipe(recipe(2), tmp_path / "child", init_checkpoint=parent.checkpoint_dir,
                         progress=False, step_offset=3)
    assert child.summary["optimizer_from"] == {"checkpoint": str(parent.checkpoint_dir)}
    a, b = _weights(straight.checkpoint_dir), _weights(child.checkpoint_dir)
    for key in a:
        assert torch.allclose(a[key], b[key], atol=1e-6, rtol=0), key

    weights_only = tmp_path / "weights-only"
    shutil.copytree(parent.checkpoint_dir, weights_only,
                    ignore=shutil.ignore_patterns("trainer_state.json", "trainer_state.safetensors"))
    fresh = train_recipe(recipe(2), tmp_path / "fresh", init_checkpoint=weights_only,
                         progress=False, step_offset=3)
    assert fresh.summary["optimizer_from"] == {"fresh": "the checkpoint holds weights only"}
    c = _weights(fresh.checkpoint_dir)
    assert max(float((a[k] - c[k]).abs().max()) for k in a) > 1e-4


def test_adopted_moments_keep_the_new_recipes_hyperparameters_and_must_fit_the_model(tiny_model_dir):
    from evo.recipe_spec import RecipeSpec

    policy = load_policy(str(tiny_model_dir))
    first = TorchEngine(policy.model, RecipeSpec.of(small_recipe()).grpo)
    for p in policy.model.parameters():
        p.grad = torch.ones_like(p)
    first.optimizer.step()
    state = first.optimizer.state_dict()
    second = TorchEngine(load_policy(str(tiny_model_dir)).model,
                         RecipeSpec.of(small_recipe(**{"grpo.learning_rate": 0.01, "grpo.weight_decay": 0.2})).grpo)
    assert second.adopt_moments(state) is None
    group = second.optimizer.param_groups[0]
    assert (group["lr"], group["weight_decay"]) == (0.01, 0.2)  # the child's recipe, not the parent's
    moved = second.optimizer.state[group["params"][0]]
    assert torch.equal(moved["exp_avg"], state["state"][0]["exp_avg"]) and float(moved["step"]) == 1.0

    bad = {"state": {0: {**state["state"][0], "exp_avg": torch.zeros(3, 3)}}, "param_groups": state["param_groups"]}
    third = TorchEngine(load_policy(str(tiny_model_dir)).model, RecipeSpec.of(small_recipe()).grpo)
    assert third.adopt_moments(bad) == "its optimizer state does not fit this model (parameter 0)"
    assert not third.optimizer.state  # left fresh


def test_a_start_checkpoint_that_cannot_lend_its_moments_says_why(tmp_path, tiny_model_dir):
    from evo.errors import TrainError
    from evo.recipe_spec import RecipeSpec
    from evo.train.checkpoint import STATE_TENSORS, adopt_optimizer
    from evo.train.run import extend_run, trains_as_now

    parent = train_recipe(small_recipe(**{"grpo.steps": 1}), tmp_path / "parent", progress=False)
    engine = TorchEngine(load_policy(str(tiny_model_dir)).model, RecipeSpec.of(small_recipe()).grpo)
    never = {"state": {}, "param_groups": engine.optimizer.state_dict()["param_groups"]}
    assert engine.adopt_moments(never) == "its optimizer never stepped"
    damaged = tmp_path / "damaged"
    shutil.copytree(parent.checkpoint_dir, damaged)
    (damaged / STATE_TENSORS).write_bytes((damaged / STATE_TENSORS).read_bytes()[:100])
    with pytest.raises(TrainError, match="damaged: the checkpoint to start from has an unreadable optimizer state"):
        adopt_optimizer(damaged, engine)

    # A run trained from a checkpoint before runs took their start's moments is not a run trained now.
    child = train_recipe(small_recipe(**{"grpo.steps": 1}), tmp_path / "child", init_checkpoint=parent.checkpoint_dir,
                         progress=False, step_offset=1)
    assert trains_as_now(child.out_dir) and trains_as_now(parent.out_dir)
    summary = json.loads((child.out_dir / "summary.json").read_text())
    del summary["optimizer_from"]
    (child.out_dir / "summary.json").write_text(json.dumps(summary))
    assert not trains_as_now(child.out_dir)
    assert extend_run(child.out_dir, tmp_path / "longer", small_recipe(**{"grpo.steps": 2})) is None


def test_a_run_is_not_extended_when_its_schedule_or_recipe_differs(tmp_path):
    from evo.train.run import extend_run

    cosine = {"grpo.lr_schedule": "cosine"}
    short = train_recipe(small_recipe(**{"grpo.steps": 2, **cosine}), tmp_path / "short", progress=False)
    # the first two rates of a 4-step cosine run are not those of a 2-step one
    assert extend_run(short.out_dir, tmp_path / "a", small_recipe(**{"grpo.steps": 4, **cosine})) is None
    other = small_recipe(**{"grpo.steps": 4, "grpo.learning_rate": 0.001})
    assert extend_run(short.out_dir, tmp_path / "b", other) is None
    assert extend_run(short.out_dir, tmp_path / "c", small_recipe(**{"grpo.steps": 2, **cosine})) is None  # not longer
    assert not any((tmp_path / n).exists() for n in "abc")


def test_all_filtered_batch_changes_no_parameter(tiny_model_dir):
    policy = load_policy(str(tiny_model_dir))
    from evo.recipe_spec import RecipeSpec

    grpo = RecipeSpec.of(small_recipe(**{"grpo.weight_decay": 0.1, "grpo.num_iterations": 2})).grpo
    engine = TorchEngine(policy.model, grpo)
    ids = policy.tokenizer("1+1=", add_special_tokens=False).input_ids
    trajs = [Trajectory("t", "easy", 0, i, "1+1=", ids, [20, 21], [1, 1], "x", "eos", False) for i in range(4)]
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    stats = engine.train_step(build_batch(trajs, [1.0, -1.0, 1.0, -1.0], [0.0] * 4, policy.tokenizer.pad_token_id))
    assert stats["loss"] == 0.0 and stats["updates"] == 0
    after = policy.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_step_offset_continues_the_prompt_schedule(tmp_path):
    """Run step s of a run at offset o draws schedule step o + s: a continuation sees new prompts."""
    from evo.domains import get_environment
    from evo.train.run import pick_tasks

    recipe = small_recipe(**{"grpo.steps": 1})
    first = train_recipe(recipe, tmp_path / "a", progress=False)
    later = train_recipe(recipe, tmp_path / "b", init_checkpoint=first.checkpoint_dir, progress=False, step_offset=7)
    tasks = get_environment(recipe["domain"]["name"], recipe["domain"]["options"]).tasks("train")
    drawn = lambda run: set(pq.read_table(run.out_dir / "rollouts.parquet").column("task_id").to_pylist())  # noqa: E731
    n = int(recipe["rollout"]["prompts_per_step"])
    assert drawn(first) == {t.id for t in pick_tasks(tasks, recipe["seed"], 0, n)}
    assert drawn(later) == {t.id for t in pick_tasks(tasks, recipe["seed"], 7, n)} != drawn(first)
    assert later.summary["step_offset"] == 7
