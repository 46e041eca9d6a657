"""Cost of a recipe before running it, for the approval gate (evo.loop.gate).

Upper bounds: every episode is assumed to use its whole token budget
(`max_new_tokens` per turn × turns, capped by `max_total_tokens`). Trained
tokens count each generated token once per policy update (`num_iterations`).
With dynamic sampling (`filters.std_group.refill`) a step may sample up to
`max_generation_batches` prompt batches: all of them are generated, one
batch's worth trains.
"""

from __future__ import annotations


def _eval_task_count(recipe: dict) -> int:
    spec = recipe["eval"]
    if spec.get("max_tasks"):
        return int(spec["max_tasks"])
    try:
        from evo.domains import get_environment

        env = get_environment(recipe["domain"]["name"], recipe["domain"]["options"])
        return len(env.tasks(spec["split"]))
    except Exception:  # the estimate must not fail on a domain that needs data to list tasks
        return 100


def episode_token_budget(recipe: dict, turns: int | None = None) -> int:
    """The most tokens one episode may generate: `max_new_tokens` per turn x turns, capped by `max_total_tokens`.

    `turns` defaults to the domain option `max_turns` (1 when unset).
    """
    r = recipe["rollout"]
    if turns is None:
        turns = int((recipe["domain"].get("options") or {}).get("max_turns", 1) or 1)
    per_episode = int(r["max_new_tokens"]) * max(1, int(turns))
    if r.get("max_total_tokens"):
        per_episode = min(per_episode, int(r["max_total_tokens"]))
    return per_episode


def generation_batches(recipe: dict) -> int:
    """The most prompt batches one step samples: `max_generation_batches` with refill, else 1."""
    std = (recipe.get("filters") or {}).get("std_group") or {}
    return int(std.get("max_generation_batches", 1)) if std.get("enabled") and std.get("refill") else 1


def estimate_cost(recipe: dict) -> dict:
    """Token estimates for training and evaluating `recipe` (a normalised dict)."""
    r, g = recipe["rollout"], recipe["grpo"]
    per_episode = episode_token_budget(recipe)
    batches = generation_batches(recipe)
    trained_trajectories = int(g["steps"]) * int(r["prompts_per_step"]) * int(r["num_generations"])
    trajectories = trained_trajectories * batches
    generated = trajectories * per_episode
    eval_tasks = _eval_task_count(recipe)
    return {
        "tokens_generated": generated,
        "tokens_trained": trained_trajectories * per_episode * int(g["num_iterations"]),
        "generation_batches": batches,
        "eval_tokens_generated": eval_tasks * int(recipe["eval"]["k"]) * per_episode,
        "steps": int(g["steps"]),
        "trajectories": trajectories,
        "per_episode_tokens": per_episode,
        "eval_tasks": eval_tasks,
        "basis": "upper bound: every episode uses its whole token budget",
    }
