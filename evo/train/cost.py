"""Cost of a recipe before running it, for the approval gate (evo.loop.gate).

Upper bounds: every episode is assumed to use its whole token budget
(`max_new_tokens` per turn × turns, capped by `max_total_tokens`). Trained
tokens count each generated token once per policy update (`num_iterations`).
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


def estimate_cost(recipe: dict) -> dict:
    """Token estimates for training and evaluating `recipe` (a normalised dict)."""
    r, g = recipe["rollout"], recipe["grpo"]
    turns = int((recipe["domain"].get("options") or {}).get("max_turns", 1) or 1)
    per_episode = int(r["max_new_tokens"]) * turns
    if r.get("max_total_tokens"):
        per_episode = min(per_episode, int(r["max_total_tokens"]))
    trajectories = int(g["steps"]) * int(r["prompts_per_step"]) * int(r["num_generations"])
    generated = trajectories * per_episode
    eval_tasks = _eval_task_count(recipe)
    return {
        "tokens_generated": generated,
        "tokens_trained": generated * int(g["num_iterations"]),
        "eval_tokens_generated": eval_tasks * int(recipe["eval"]["k"]) * per_episode,
        "steps": int(g["steps"]),
        "trajectories": trajectories,
        "per_episode_tokens": per_episode,
        "eval_tasks": eval_tasks,
        "basis": "upper bound: every episode uses its whole token budget",
    }
