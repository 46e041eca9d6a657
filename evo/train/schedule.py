"""Learning-rate schedules over a run's GRPO steps (`grpo.lr_schedule`, `grpo.warmup_steps`).

The rate of step s (0-based) of a run of T = `grpo.steps` steps, base rate
`grpo.learning_rate` and W warmup steps:

    s <  W:  base * (s + 1) / W                                   linear warmup, reaching base at step W - 1
    s >= W:  p = (s - W) / max(T - W, 1)                          progress in [0, 1) over the remaining steps
             constant: base
             linear:   base * (1 - p)
             cosine:   base * (1 + cos(pi * p)) / 2

Every step trains at a positive rate (the last one at p = (T - W - 1) / (T - W)),
and with W = 0 a constant schedule is exactly the fixed rate. The rate is a
function of the step alone, so a resumed run needs no scheduler state: it
recomputes the rate of the step it resumes at. All `num_iterations` updates of
one step use that step's rate.
"""

from __future__ import annotations

import math

from evo.errors import TrainError

SCHEDULES = ("constant", "cosine", "linear")


def lr_at(step: int, *, base: float, steps: int, schedule: str = "constant", warmup: int = 0) -> float:
    """The learning rate of 0-based GRPO step `step` (see the module docstring)."""
    if schedule not in SCHEDULES:
        raise TrainError(f"recipe.yaml: grpo.lr_schedule: {schedule!r} is not a schedule; use one of {', '.join(SCHEDULES)}")
    step, warmup = int(step), int(warmup)
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(int(steps) - warmup, 1)
    if schedule == "linear":
        return base * (1.0 - progress)
    if schedule == "cosine":
        return base * (1.0 + math.cos(math.pi * progress)) / 2.0
    return base


def rate_ignores_length(grpo: dict) -> bool:
    """Whether every step's rate is independent of the run's length T (a constant schedule, warmup or not), so
    the first S steps of a longer run are the S-step run's (`evo.train.run.extend_run`)."""
    return (grpo.get("lr_schedule") or "constant") == "constant"
