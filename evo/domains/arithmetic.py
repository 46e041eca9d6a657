"""The embedded default domain: integer arithmetic with known answers.

A prompt is the bare expression, ``"48+7="``; a well-formed answer is the number
followed by a newline (``"55\\n"``), which is also the generation stop string, so
an answer that does not fit the generation limit is visibly cut off. Three
difficulty strata:

- ``easy``:   a ± b with single digits (1–2 digit answers)
- ``medium``: a 2-digit a ± a digit, or a × b of digits (1–3 digit answers)
- ``hard``:   a 4-digit a ± a digit (4–5 digit answers: with the newline they
  need 5–6 tokens, more than a 4-token generation limit allows)

What makes a stratum hard is mostly the answer's length: every sampled token
is a chance to go wrong, and long answers are the ones a short generation
limit cuts off.

Splits are generated from a fixed seed, so they are identical on every machine;
the validation tasks never appear in the train split.

Reward components (all floats, see `score_completion`):
`correctness` 1 iff the closed answer equals the reference; `partial_credit`
share of digits matching the reference, left-aligned (as generated), in [0, 1];
`format` 1 iff the response is exactly an integer then the newline; `length`
1 while the response is no longer than the answer needs, falling to 0 at three
times that; `judge_if` a deterministic instruction-following judge: the mean of
four checks (non-empty, digits only, no leading zero, closed by the newline).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from evo.domains.base import StepResult, Task, check_positive_ints
from evo.errors import ConfigError

STRATA = ("easy", "medium", "hard")
COMPONENTS = ("correctness", "partial_credit", "format", "length", "judge_if")
TERMINATOR = "\n"
_INTEGER = re.compile(r"-?\d+")


def _sample_problem(rng: random.Random, stratum: str) -> tuple[int, str, int]:
    if stratum == "easy":
        op = rng.choice("+-")
        a, b = rng.randrange(0, 10), rng.randrange(0, 10)
    elif stratum == "medium":
        op = rng.choice("+-*")
        if op == "*":
            a, b = rng.randrange(2, 10), rng.randrange(2, 10)
        else:
            a, b = rng.randrange(10, 100), rng.randrange(0, 10)
    elif stratum == "hard":
        op = rng.choice("+-")
        a, b = rng.randrange(1010, 10000), rng.randrange(0, 10)  # a - b stays at 4 digits
    else:
        raise ConfigError(f"recipe.yaml: domain.options.strata: {stratum!r} is not a stratum; use {', '.join(STRATA)}")
    if op == "-" and b > a:
        a, b = b, a  # non-negative answers only
    return a, op, b


def _evaluate(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def make_splits(seed: int, n_train: int, n_validation: int, strata=STRATA) -> dict[str, list[Task]]:
    """Deterministic train / validation task lists, balanced across strata, disjoint.

    Validation expressions are unique and never drawn for train; train may repeat
    an easy expression (there are only a few hundred of them).
    """
    rng = random.Random(f"arithmetic-{seed}")
    held_out: set[str] = set()
    splits: dict[str, list[Task]] = {}
    for split, count in (("validation", n_validation), ("train", n_train)):
        tasks = []
        for i in range(count):
            stratum = strata[i % len(strata)]
            while True:
                a, op, b = _sample_problem(rng, stratum)
                expr = f"{a}{op}{b}="
                if expr not in held_out:
                    break
            if split == "validation":
                held_out.add(expr)
            tasks.append(Task(id=f"{split[:3]}-{stratum}-{i // len(strata):04d}", prompt=expr,
                              answer=_evaluate(a, op, b), stratum=stratum, meta={"a": a, "op": op, "b": b}))
        splits[split] = tasks
    return splits


def score_completion(text: str, answer: int) -> tuple[dict[str, float], str]:
    """Reward components for one response, and the extracted final answer ("" if none)."""
    closed = TERMINATOR in text
    body = text.split(TERMINATOR, 1)[0]
    reference = str(answer)
    is_integer = _INTEGER.fullmatch(body) is not None
    extracted = body if closed and is_integer else ""
    correct = extracted != "" and int(extracted) == answer

    digits = "".join(ch for ch in body if ch.isdigit())
    span = max(len(digits), len(reference))
    partial = sum(p == r for p, r in zip(digits, reference)) / span if span else 0.0

    needed = len(reference) + len(TERMINATOR)
    length = min(1.0, max(0.0, 1.0 - (len(text) - needed) / (2 * needed)))

    checks = (
        body != "",
        is_integer,
        is_integer and (body.lstrip("-") == "0" or not body.lstrip("-").startswith("0")),
        closed and text.endswith(TERMINATOR) and text.count(TERMINATOR) == 1,
    )
    components = {
        "correctness": 1.0 if correct else 0.0,
        "partial_credit": float(partial),
        "format": 1.0 if closed and is_integer and text == body + TERMINATOR else 0.0,
        "length": float(length),
        "judge_if": sum(checks) / len(checks),
    }
    return components, extracted


@dataclass
class ArithmeticEpisode:
    task: Task

    def step(self, action: str) -> StepResult:
        components, extracted = score_completion(action, int(self.task.answer))
        return StepResult(observation=None, components=components, done=True, info={"answer": extracted})

    def close(self) -> None:
        pass


class ArithmeticEnv:
    """Single-turn arithmetic. Options: `seed` (splits), `n_train`, `n_validation`, `strata`."""

    name = "arithmetic"
    reward_components = COMPONENTS
    max_turns = 1
    stop = (TERMINATOR,)

    def __init__(self, seed: int = 0, n_train: int = 3000, n_validation: int = 90, strata=STRATA):
        check_positive_ints(n_train=n_train, n_validation=n_validation)
        strata = tuple(strata)
        for s in strata:
            if s not in STRATA:
                raise ConfigError(f"recipe.yaml: domain.options.strata: {s!r} is not a stratum; use {', '.join(STRATA)}")
        self._splits = make_splits(int(seed), n_train, n_validation, strata)

    def tasks(self, split: str) -> list[Task]:
        if split not in self._splits:
            raise ConfigError(f"recipe.yaml: eval.split: {split!r} is not an arithmetic split; use train or validation")
        return list(self._splits[split])

    def render_prompt(self, task: Task) -> str:
        return task.prompt

    def reset(self, task: Task) -> ArithmeticEpisode:
        return ArithmeticEpisode(task)
