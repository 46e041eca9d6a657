"""The environment interface every domain implements.

One interface covers single-turn tasks (arithmetic, math, code: the episode is
one action) and multi-turn episodes (swe: read / edit / run_tests / submit).

    env = get_environment("arithmetic", options)
    tasks = env.tasks("train")
    obs = env.reset(task)                  # the first prompt text
    result = env.step(action_text)         # StepResult(observation, components, done, info)

`reset` returns a fresh `Episode` handle so many episodes of the same env can
run side by side (batched generation across a group). Reward components are
floats, named consistently per domain (`reward_components`); the recipe's
`reward.terms` weight them, so every component is stored per trajectory and a
backtest can re-weight without generating again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Task:
    """One problem. `answer` is the reference, never shown to the policy."""

    id: str
    prompt: str
    answer: Any = None
    stratum: str = "all"  # difficulty level or benchmark subset, for stratified statistics
    meta: dict = field(default_factory=dict)


@dataclass
class StepResult:
    observation: str | None  # text appended to the context for the next turn; None when done
    components: dict[str, float]  # reward components; final values when done
    done: bool
    info: dict = field(default_factory=dict)  # tool_calls, errors, extracted answer, ...


class Episode(Protocol):
    """One running episode of a task. Created by `Environment.reset`."""

    task: Task

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...


class Environment(Protocol):
    name: str
    reward_components: tuple[str, ...]  # every component `step` may report
    max_turns: int  # 1 for single-turn domains
    stop: tuple[str, ...]  # extra stop strings for generation (besides EOS)

    def tasks(self, split: str) -> list[Task]: ...

    def render_prompt(self, task: Task) -> str: ...

    def reset(self, task: Task) -> Episode: ...


def check_positive_ints(**options: Any) -> None:
    """Raise ConfigError for the first option that is not a whole number >= 1 (None: left to the domain).

    YAML's `true` is a Python bool, which is an int; it is refused, not read as 1.
    The value is quoted as the recipe spells it, so `max_turns: true` reads back as `true`.
    """
    from evo.errors import ConfigError

    for key, value in options.items():
        if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            continue
        import yaml

        spelled = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
        raise ConfigError(f"recipe.yaml: domain.options.{key}: {spelled} is not a positive integer; "
                          f"set it to a whole number such as 1 or more, or leave it out for the domain's default")
