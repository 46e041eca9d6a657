"""Cost of a recipe before running it, for the approval gate (evo.loop.gate).

Upper bounds: every episode is assumed to use its whole token budget
(`max_new_tokens` per turn × turns, capped by `max_total_tokens`). Trained
tokens count each generated token once per policy update (`num_iterations`).
With dynamic sampling (`filters.std_group.refill`) a step may sample up to
`max_generation_batches` prompt batches: all of them are generated, one
batch's worth trains.
"""

from __future__ import annotations

from typing import Mapping

from evo.recipe_spec import RecipeSpec, Rollout


def _eval_task_count(spec: RecipeSpec) -> int:
    if spec.eval.max_tasks:
        return int(spec.eval.max_tasks)
    try:
        from evo.domains import get_environment

        env = get_environment(spec.domain.name, spec.domain.options)
        return len(env.tasks(spec.eval.split))
    except Exception:  # the estimate must not fail on a domain that needs data to list tasks
        return 100


def episode_token_budget(rollout: Rollout, turns: int) -> int:
    """The most tokens one episode may generate: `max_new_tokens` per turn x turns, capped by `max_total_tokens`."""
    per_episode = rollout.max_new_tokens * max(1, int(turns))
    if rollout.max_total_tokens:
        per_episode = min(per_episode, rollout.max_total_tokens)
    return per_episode


def option_turns(options: Mapping) -> int:
    """The turn limit a recipe's `domain.options` name (`max_turns`), 1 when they name none."""
    return int((options or {}).get("max_turns", 1) or 1)


def estimate_cost(recipe: Mapping) -> dict:
    """Token estimates for training and evaluating `recipe` (a normalised recipe)."""
    from evo.train.filters import FilterConfig

    spec = RecipeSpec.of(recipe)
    r, g = spec.rollout, spec.grpo
    per_episode = episode_token_budget(r, option_turns(spec.domain.options))
    batches = FilterConfig.from_recipe(spec.filters).generation_batches
    trained_trajectories = g.steps * r.prompts_per_step * r.num_generations
    trajectories = trained_trajectories * batches
    generated = trajectories * per_episode
    eval_tasks = _eval_task_count(spec)
    return {
        "tokens_generated": generated,
        "tokens_trained": trained_trajectories * per_episode * g.num_iterations,
        "generation_batches": batches,
        "eval_tokens_generated": eval_tasks * spec.eval.k * per_episode,
        "steps": g.steps,
        "trajectories": trajectories,
        "per_episode_tokens": per_episode,
        "eval_tasks": eval_tasks,
        "basis": "upper bound: every episode uses its whole token budget",
    }
