"""The rollout driver: environments + a policy → trajectories. Generic over domains.

Single-turn environments (`max_turns == 1`) sample every task × group member in
one batched `generate` call. Multi-turn episodes run turn by turn, batching one
generate call across all live episodes; each turn's action tokens are appended
with response_mask 1, the environment's observation tokens with response_mask 0
(they are context, not policy output). Limits: `max_new_tokens` per turn and
`max_total_tokens` per episode (prompt excluded); a trajectory that hits either
is `truncated`, with finish reason `length` when a turn's action reached
`max_new_tokens` and `max_total_tokens` when the episode's budget ran out
(an action cut short by it, or no room left for the next observation): the two
call for different levers. The finish reason is the last turn's, so
`turns_cut` counts the turns the per-turn limit cut: an episode whose actions
were cut at `max_new_tokens`, then idled until the budget ran out, ended on the
budget but was cut by the turn's limit. An episode that is not done after `max_turns` ends
with finish reason `max_turns`.

The driver reads these keys from `StepResult.info` when present: `answer` (the
extracted final answer), `tool` (name of the tool this turn called) or `tools`
(list of names), `error`. Everything else in `info` is kept on the trajectory.

Seeds: call i of a rollout samples with `seed + i`, so a rollout is
reproducible and independent of the global RNG. A policy whose
`generate_ids` takes `streams` (the HF and vLLM backends) is instead given
`seed + turn` and each row's (group id, sample) as its stream: a trajectory
then draws the same tokens whichever rows share its batch, so a data-parallel
rank rolling out its shard of a step (`group_ids`: the groups' ids in the
whole step) produces exactly the trajectories of one process rolling out all.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Sequence

from evo.domains.base import Task
from evo.recipe_spec import Rollout
from evo.train.types import EPISODE_BUDGET, Trajectory


@dataclass(frozen=True)
class RolloutLimits:
    max_new_tokens: int
    max_total_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    max_turns: int | None = None  # None: the environment's own max_turns

    @classmethod
    def of(cls, r: Rollout, env, *, temperature: float | None = None) -> "RolloutLimits":
        """The limits of a recipe's `rollout` section (the domain's stop strings first)."""
        return cls(
            max_new_tokens=r.max_new_tokens,
            max_total_tokens=r.max_total_tokens,
            temperature=float(temperature if temperature is not None else r.temperature),
            top_p=r.top_p,
            stop=tuple(dict.fromkeys(tuple(env.stop) + r.stop)),
        )


@dataclass
class _Live:
    """Bookkeeping of one running episode."""

    traj: Trajectory
    episode: object
    done: bool = False
    hit_limit: bool = False


def _tools_of(info: dict) -> list[str]:
    if info.get("tools"):
        return [str(t) for t in info["tools"]]
    return [str(info["tool"])] if info.get("tool") else []


def takes_streams(policy) -> bool:
    """Whether `policy.generate_ids` draws each row from its own stream (see the module docstring)."""
    try:
        return "streams" in inspect.signature(policy.generate_ids).parameters
    except (TypeError, ValueError):
        return False


def rollout(env, tasks: Sequence[Task], policy, group_size: int, limits: RolloutLimits, *,
            seed: int = 0, max_batch: int = 1024, group_ids: Sequence[int] | None = None) -> list[Trajectory]:
    """Sample `group_size` trajectories for each task; group id = `group_ids[i]` (default: position in `tasks`)."""
    live: list[_Live] = []
    for g, task in zip(range(len(tasks)) if group_ids is None else group_ids, tasks):
        prompt = env.render_prompt(task)
        prompt_ids = policy.encode_prompt(prompt)
        for s in range(group_size):
            traj = Trajectory(task_id=task.id, stratum=task.stratum, group=g, sample=s, prompt=prompt,
                              prompt_ids=list(prompt_ids), response_ids=[], response_mask=[], text="",
                              finish_reason="", truncated=False, turns=0,
                              info={"answer": "", "tools": [], "transcript": [{"role": "user", "content": prompt}]})
            live.append(_Live(traj, env.reset(task)))
    max_turns = limits.max_turns or int(getattr(env, "max_turns", 1) or 1)
    streams = takes_streams(policy)
    call = 0
    for turn in range(max_turns):
        running = [x for x in live if not x.done]
        if not running:
            break
        for start in range(0, len(running), max_batch):
            _advance(running[start: start + max_batch], policy, limits, seed + turn if streams else seed + call,
                     streams)
            call += 1
    for x in live:
        if not x.done:  # still running after the last allowed turn
            x.traj.finish_reason = "max_turns"
            _close(x)
    trajs = [x.traj for x in live]
    for t in trajs:
        if t.turns <= 1:
            t.info["transcript"] = []  # single-turn: the prompt and text say it all
    return trajs


def _advance(chunk: list[_Live], policy, limits: RolloutLimits, seed: int, streams: bool = False) -> None:
    """One turn for every episode in `chunk`: one batched generate call, then each episode's step."""
    budgets = []
    for x in chunk:
        budget = limits.max_new_tokens
        if limits.max_total_tokens is not None:
            budget = min(budget, limits.max_total_tokens - len(x.traj.response_ids))
        budgets.append(max(budget, 1))
    contexts = [x.traj.prompt_ids + x.traj.response_ids for x in chunk]
    extra = {"streams": [(x.traj.group, x.traj.sample) for x in chunk]} if streams else {}
    gens = policy.generate_ids(contexts, max_new_tokens=max(budgets), temperature=limits.temperature,
                               top_p=limits.top_p, stop=limits.stop, seed=seed, **extra)
    for x, gen, budget in zip(chunk, gens, budgets):
        ids, text, reason = gen.token_ids, gen.text, gen.finish_reason
        if len(ids) > budget:  # this episode had less room than the batch maximum
            ids, reason = ids[:budget], "length"
            text = policy.decode(ids)
        if reason == "length" and budget < limits.max_new_tokens:  # the episode's budget cut the action, not the turn's
            reason = EPISODE_BUDGET
        t = x.traj
        t.response_ids += list(ids)
        t.response_mask += [1] * len(ids)
        t.text += text
        t.turns += 1
        t.finish_reason = reason
        t.turns_cut += int(reason == "length")
        if gen.entropy is not None and ids:  # token-weighted across turns
            t.info["entropy_sum"] = t.info.get("entropy_sum", 0.0) + gen.entropy * len(ids)
            t.info["entropy_tokens"] = t.info.get("entropy_tokens", 0) + len(ids)
        if reason in ("length", EPISODE_BUDGET):
            x.hit_limit = True
        t.info["transcript"].append({"role": "assistant", "content": text})
        try:
            result = x.episode.step(text)
        except Exception as exc:  # a broken environment ends this episode, not the run
            t.finish_reason, t.info["error"] = "error", f"{type(exc).__name__}: {exc}"
            _close(x)
            continue
        t.components = {k: float(v) for k, v in result.components.items()}
        info = dict(result.info or {})
        tools = _tools_of(info)
        t.info["tools"] += tools
        t.tool_calls += len(tools)
        if info.get("answer") is not None:
            t.info["answer"] = str(info["answer"])
        if info.get("error"):
            t.info["error"] = str(info["error"])
        for k, v in info.items():
            if k not in ("answer", "tool", "tools", "error"):
                t.info.setdefault("extra", {})[k] = v
        if result.done:
            _close(x)
            continue
        room = None if limits.max_total_tokens is None else limits.max_total_tokens - len(t.response_ids)
        if room is not None and room <= 0:  # no budget left to act on another observation
            x.hit_limit, t.finish_reason = True, EPISODE_BUDGET
            _close(x)
            continue
        obs = result.observation or ""
        obs_ids = policy.encode_observation(obs) if obs else []
        full = room is not None and len(obs_ids) >= room  # the observation fills the episode budget
        if full:
            obs_ids = obs_ids[:room]
            obs = policy.decode(obs_ids)
        t.response_ids += obs_ids
        t.response_mask += [0] * len(obs_ids)
        t.text += obs
        t.info["transcript"].append({"role": "user", "content": obs})
        if full:
            x.hit_limit, t.finish_reason = True, EPISODE_BUDGET
            _close(x)


def _close(x: _Live) -> None:
    x.done = True
    x.traj.truncated = x.hit_limit
    try:
        x.episode.close()
    except Exception as exc:  # cleanup failures are recorded, never fatal
        x.traj.info["close_error"] = f"{type(exc).__name__}: {exc}"


def transcript_json(traj: Trajectory) -> str:
    """The transcript column of rollouts.parquet: "" for single-turn."""
    return json.dumps(traj.info.get("transcript") or []) if traj.turns > 1 else ""
