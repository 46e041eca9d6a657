"""grpo.lr_schedule / grpo.warmup_steps: the logged policy/lr follows the schedule, also across a resume."""

import math
import os
import signal

import pytest

from evo.train.records import read_metrics
from evo.train.run import train_recipe
from evo.train.trainer import Trainer

from .conftest import small_recipe

BASE = 0.002


def _lrs(out):
    return [m["policy/lr"] for m in read_metrics(out / "metrics.jsonl")]


def test_default_is_the_constant_rate(tmp_path):
    recipe = small_recipe(**{"grpo.steps": 2})
    assert (recipe["grpo"]["lr_schedule"], recipe["grpo"]["warmup_steps"]) == ("constant", 0)
    assert _lrs(train_recipe(recipe, tmp_path / "run", progress=False).out_dir) == [BASE, BASE]


def _scheduled(schedule: str, **extra) -> dict:
    """5 steps, 2 of them warmup, on a tiny batch."""
    return small_recipe(**{"grpo.steps": 5, "grpo.lr_schedule": schedule, "grpo.warmup_steps": 2,
                           "rollout.prompts_per_step": 2, "rollout.num_generations": 2, "eval.k": 1, **extra})


def test_linear_decay_after_warmup(tmp_path):
    # warmup: 1/2, 2/2 of the rate; then progress 0, 1/3, 2/3 over the last 3 steps
    res = train_recipe(_scheduled("linear"), tmp_path / "run", progress=False)
    assert _lrs(res.out_dir) == pytest.approx([BASE / 2, BASE, BASE, BASE * 2 / 3, BASE / 3], rel=1e-12)


def test_cosine_rate_is_logged_and_survives_a_resume(tmp_path, monkeypatch):
    expected = [BASE / 2, BASE, BASE, BASE * (1 + math.cos(math.pi / 3)) / 2, BASE * (1 + math.cos(2 * math.pi / 3)) / 2]
    recipe = _scheduled("cosine")
    original = Trainer.run_step

    def run_step_then_ctrl_c(self, step):
        metrics = original(self, step)
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)  # stop after step 2; the rerun resumes at step 3
        return metrics

    monkeypatch.setattr(Trainer, "run_step", run_step_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        train_recipe(recipe, tmp_path / "run", progress=False)
    monkeypatch.setattr(Trainer, "run_step", original)
    res = train_recipe(recipe, tmp_path / "run", progress=False)
    assert res.summary["resumed_from_step"] == 3
    assert _lrs(res.out_dir) == pytest.approx(expected, rel=1e-12)
