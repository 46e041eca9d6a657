"""Types shared by rollout, training, evaluation and the domains.

A `Policy` turns prompts into `Generation`s; the rollout driver turns episodes
into `Trajectory`s; the trainer only ever sees trajectories, so single-turn and
multi-turn domains train through the same code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

# A trajectory's finish reason when the episode's token budget (`rollout.max_total_tokens`) ran out, where "length"
# is a turn's action reaching `max_new_tokens`: the two call for different levers. When both bind in one episode (a
# turn cut by max_new_tokens, then an observation that fills the budget), the one reached last names it.
EPISODE_BUDGET = "max_total_tokens"


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    finish_reason: str  # "eos" | "stop" | "length"
    entropy: float | None = None  # mean entropy of the sampling distribution over its tokens, if the backend reports it


class Policy(Protocol):
    """Anything that can sample completions: the HF backend, vLLM, a scripted test policy."""

    tokenizer: object

    def generate(
        self,
        prompts: Sequence[str],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] = (),
        seed: int | None = None,
    ) -> list[Generation]: ...

    # The rollout driver works on token ids so multi-turn contexts are never re-tokenised.
    def generate_ids(
        self,
        prompt_ids: Sequence[Sequence[int]],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        stop: Sequence[str] = (),
        seed: int | None = None,
    ) -> list[Generation]: ...

    def encode_prompt(self, text: str) -> list[int]: ...  # first-turn prompt (chat template where enabled)

    def encode_observation(self, text: str) -> list[int]: ...  # tokens appended after an action

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass
class Trajectory:
    """One sampled episode, ready for loss computation and for the rollout record."""

    task_id: str
    stratum: str
    group: int  # index of the group (one prompt x num_generations) within the step
    sample: int  # index within the group
    prompt: str
    prompt_ids: list[int]
    response_ids: list[int]  # every token after the prompt: actions and observations
    response_mask: list[int]  # 1 where the token was produced by the policy (trained), else 0
    text: str  # the response as text (actions and observations interleaved)
    finish_reason: str  # "eos" | "stop" | "length" | EPISODE_BUDGET | "max_turns" | "error"
    truncated: bool
    turns: int = 1
    tool_calls: int = 0
    # Turns whose action reached `max_new_tokens` (the turn's own limit; an action the episode budget cut short
    # is not counted): what tells a turn's limit from the episode's when an episode hit both.
    turns_cut: int = 0
    components: dict[str, float] = field(default_factory=dict)
    info: dict = field(default_factory=dict)  # answer, tool names, errors, transcript
