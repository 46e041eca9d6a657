"""Avg@k on a frozen split with a fixed seed: `eval.parquet` + `eval.json`.

Each task is sampled k times with the recipe's rollout limits at the eval
temperature, through the same rollout driver as training (so multi-turn
domains evaluate the same way). A sample's `score` is its `correctness`
component (the headline, in [0, 1]); Avg@k of a task is the mean score of its
k samples and the reported `avg_at_k` is the mean over tasks. `pass_at_k` is the
share of tasks with at least one fully correct sample. Same checkpoint, recipe,
k and seed → the same numbers, whatever the number of processes: in a
data-parallel run each rank evaluates every world-th task (a task's samples are
drawn from its own streams, see `evo.train.rollout`), and rank 0 gathers the
rows in task order and writes eval.parquet / eval.json.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from evo.recipe_spec import Model, RecipeSpec
from evo.train.records import eval_schema, idle_turns, tool_result, write_json, write_table

HEADLINE = "correctness"


def _as_policy(model_or_checkpoint, model: Model, device):
    if hasattr(model_or_checkpoint, "generate_ids"):
        return model_or_checkpoint
    from evo.train.policy import load_policy

    # On the device training uses (a GPU where there is one), so a checkpoint evaluates as its run evaluated it.
    return load_policy(str(model_or_checkpoint), dtype=model.dtype, chat_template=model.chat_template,
                       device=str(device))


def summarize(rows: list[dict], k: int, seed: int) -> dict:
    """eval.json from eval rows: avg_at_k, per_stratum, pass_at_k."""
    per_task: dict[str, list[float]] = defaultdict(list)
    stratum_of: dict[str, str] = {}
    for r in rows:
        per_task[r["task_id"]].append(float(r["score"]))
        stratum_of[r["task_id"]] = r["stratum"]
    task_avg = {t: sum(s) / len(s) for t, s in per_task.items()}
    by_stratum: dict[str, list[float]] = defaultdict(list)
    for t, avg in task_avg.items():
        by_stratum[stratum_of[t]].append(avg)
    n = len(task_avg)
    return {
        "avg_at_k": sum(task_avg.values()) / n if n else 0.0,
        "k": int(k),
        "seed": int(seed),
        "n_tasks": n,
        "per_stratum": {s: sum(v) / len(v) for s, v in sorted(by_stratum.items())},
        "pass_at_k": sum(max(s) >= 1.0 - 1e-9 for s in per_task.values()) / n if n else 0.0,
        "truncated_frac": sum(bool(r["truncated"]) for r in rows) / len(rows) if rows else 0.0,
    }


def evaluate(model_or_checkpoint, recipe: dict, out_dir: str | Path | None, k: int | None = None,
             seed: int | None = None) -> dict:
    """Evaluate a policy (or checkpoint folder / model name) under `recipe`; returns the eval.json dict.

    Writes `eval.parquet` and `eval.json` into `out_dir` (skipped when out_dir is None).
    """
    from evo.domains import get_environment
    from evo.train.distributed import current
    from evo.train.rollout import RolloutLimits, rollout, transcript_json

    typed = RecipeSpec.of(recipe)
    spec = typed.eval
    k = int(k if k is not None else spec.k)
    seed = int(seed if seed is not None else spec.seed)
    env = get_environment(typed.domain.name, typed.domain.options)
    tasks = env.tasks(spec.split)
    if spec.max_tasks:
        tasks = tasks[: spec.max_tasks]
    ranks = current()
    policy = _as_policy(model_or_checkpoint, typed.model, ranks.device)
    limits = RolloutLimits.of(typed.rollout, env, temperature=spec.temperature)
    mine = ranks.shard(len(tasks))
    trajs = rollout(env, [tasks[i] for i in mine], policy, k, limits, seed=seed, group_ids=mine)
    components = list(env.reward_components)
    rows = []
    for t in trajs:
        row = {
            "task_id": t.task_id, "stratum": t.stratum, "sample": t.sample, "prompt": t.prompt,
            "completion": t.text, "answer": t.info.get("answer", ""),
            "score": float(t.components.get(HEADLINE, 0.0)),
            "num_tokens": int(sum(t.response_mask)), "truncated": bool(t.truncated),
            "finish_reason": t.finish_reason, "turns": int(t.turns), "tool_calls": int(t.tool_calls),
            "tools": list(t.info.get("tools", [])), "idle_turns": idle_turns(t.info), "tool_result": tool_result(t.info),
            "turns_cut": int(t.turns_cut),
            "transcript": transcript_json(t),
        }
        for c in components:
            row[f"reward/{c}"] = float(t.components.get(c, 0.0))
        rows.append((t.group, t.sample, row))
    gathered = ranks.gather(rows)
    if not ranks.main:
        return ranks.broadcast(None)
    rows = [row for _, _, row in sorted((r for part in gathered for r in part), key=lambda r: r[:2])]
    result = summarize(rows, k, seed)
    result["model"] = getattr(policy, "name", str(model_or_checkpoint))
    result["split"] = spec.split
    if out_dir is not None:
        out = Path(out_dir)
        write_table(rows, eval_schema(components), out / "eval.parquet")
        write_json(result, out / "eval.json")
    return ranks.broadcast(result)
