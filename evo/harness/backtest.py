"""Backtests: replay a run's stored rollouts under a candidate reward or filter change.

Every reward component is stored per trajectory (`reward/<component>`), so a
change to `reward.terms`, `filters.*` or `grpo.scale_advantage_by_std` can be
evaluated without generating anything: recombine the totals, re-run the
filters and recompute group-normalised advantages, once under the run's recipe
("before") and once under the patched recipe ("after"), then report the
predicted effect as numbers and one sentence — e.g. "45% of dead groups regain
non-zero spread" (paper D.3).

The replay calls the training code itself (`evo.train.rewards`,
`evo.train.filters`, `evo.train.objective`), so a backtest and a real run can
never disagree on what a reward term or a filter means. Limits: in multi-turn
domains `completion_tokens` includes observation tokens, so the
`repeated_ngram` rule sees slightly more tokens than training did; a change to
generation (`rollout.*`, the model, the data) cannot be replayed.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from evo.errors import ConfigError, HarnessError
from evo.harness import kit
from evo.harness.context import RunArtifacts
from evo.recipe import DEFAULT_REWARD_TERMS, get_path

REPLAYABLE = {"reward": None, "filters": None, "grpo": {"scale_advantage_by_std"}}
DEAD_EPSILON = 1e-6  # a group is dead when the population std of its total reward is at most this


def merge_patch(recipe: dict, change: dict) -> dict:
    """Deep-merge `change` into a copy of `recipe`; lists (e.g. reward.terms) replace wholesale."""
    out = copy.deepcopy(recipe)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_patch(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _check_change(change: dict, recipe: dict) -> None:
    if not isinstance(change, dict) or not change:
        raise HarnessError("backtest: the change must be a non-empty recipe patch, e.g. {filters: {std_group: {enabled: true}}}")
    for key, value in change.items():
        if key not in REPLAYABLE:
            raise HarnessError(f"backtest: {key}: cannot be replayed from stored rollouts (it changes generation or data); "
                               "backtest reward.*, filters.* or grpo.scale_advantage_by_std")
        allowed = REPLAYABLE[key]
        if allowed is not None and isinstance(value, dict) and set(value) - allowed:
            bad = sorted(set(value) - allowed)[0]
            raise HarnessError(f"backtest: {key}.{bad}: cannot be replayed from stored rollouts; only {key}.{', '.join(sorted(allowed))} can")
    from evo.schemas import validate

    # The patch must be a valid fragment of a recipe: validate it next to the recipe's required keys.
    probe = {"domain": recipe.get("domain") or {"name": "any"}, "model": recipe.get("model") or {"name": "any"}, **change}
    validate(probe, "recipe", source="backtest change", error_cls=ConfigError)


def _terms(recipe: dict) -> list[dict]:
    """The recipe's reward terms (weight and mode default in evo.train.rewards)."""
    return get_path(recipe, "reward.terms") or DEFAULT_REWARD_TERMS


def _require_components(recipe: dict, stored: list[str], where: str, run_dir: Path) -> None:
    needed = [t["name"] for t in _terms(recipe)]
    std = (recipe.get("filters") or {}).get("std_group") or {}
    if std.get("enabled") and std.get("component", "total") != "total":
        needed.append(std["component"])
    for name in needed:
        if name not in stored:
            raise HarnessError(f"backtest: {where} needs reward component {name!r}, which {run_dir}/rollouts.parquet does not store "
                               f"(stored: {', '.join(stored) or 'none'}); pick a stored component or train with a domain that emits it")


def _flags(table, cfg) -> list:
    """Per-row TrajectoryFlags dicts carrying only what the enabled anomaly rules read."""
    n = table.num_rows
    truncated = kit.col(table, "truncated", bool).tolist() if kit.has(table, "truncated") else [False] * n
    num_tokens = kit.col(table, "num_tokens", np.int64).tolist() if kit.has(table, "num_tokens") else [1] * n
    finish = kit.col(table, "finish_reason").astype(str).tolist() if kit.has(table, "finish_reason") else [""] * n
    rules = set(cfg.anomaly_rules) if cfg.anomaly else set()
    tokens = table.column("completion_tokens").to_pylist() if "repeated_ngram" in rules and kit.has(table, "completion_tokens") else None
    text = table.column("completion").to_pylist() if "empty" in rules and kit.has(table, "completion") else None
    return [{"truncated": truncated[i], "num_tokens": num_tokens[i], "finish_reason": finish[i],
             "tokens": (tokens[i] or ()) if tokens is not None else (), "text": text[i] if text is not None else None}
            for i in range(n)]


def replay(table, recipe: dict, g: kit.GroupIndex, flags_cache: dict) -> dict:
    """Totals, filter decisions and advantages of every stored trajectory under `recipe`."""
    import torch

    from evo.train.filters import FilterConfig, apply_filters
    from evo.train.objective import group_advantages
    from evo.train.rewards import total_rewards

    terms = _terms(recipe)
    columns = {t["name"]: kit.col(table, f"reward/{t['name']}", np.float64).tolist() for t in terms}
    totals = np.asarray(total_rewards(columns, terms), dtype=np.float64)  # (rows,)
    cfg = FilterConfig.from_recipe(recipe.get("filters"))
    key = (cfg.anomaly, cfg.anomaly_rules)
    if key not in flags_cache:
        flags_cache[key] = _flags(table, cfg)
    flags = flags_cache[key]

    bounds = list(zip(g.starts, g.starts + g.sizes))
    rows_of = [g.order[a:b] for a, b in bounds]  # row indices of each group
    component_values = None
    if cfg.std_group and cfg.std_component != "total":
        comp = kit.col(table, f"reward/{cfg.std_component}", np.float64)
        component_values = {cfg.std_component: [comp[r].tolist() for r in rows_of]}
    decisions = apply_filters([totals[r].tolist() for r in rows_of], component_values,
                              [[flags[i] for i in r] for r in rows_of], cfg)
    kept = np.zeros(len(totals), bool)
    masked = np.zeros(len(totals), bool)
    in_stats = np.zeros(len(totals), bool)
    reasons: dict[str, int] = {}
    for r, ds in zip(rows_of, decisions):  # a loop over groups; rows inside are plain lists
        kept[r] = [d.kept for d in ds]
        masked[r] = [d.masked for d in ds]
        in_stats[r] = [d.in_group_stats for d in ds]
        for d in ds:
            if d.reason:
                reason = " ".join(d.reason.split()[:2])  # "std_group: spread", "anomaly: truncated": no values
                reasons[reason] = reasons.get(reason, 0) + 1
    grpo = recipe.get("grpo") or {}
    adv = group_advantages(torch.from_numpy(totals), torch.from_numpy(g.gid), torch.from_numpy(in_stats),
                           scale_by_std=bool(grpo.get("scale_advantage_by_std", True))).numpy()  # (rows,)
    dead = g.std(totals) <= DEAD_EPSILON  # (groups,)
    kept_groups = np.add.reduceat(kept[g.order].astype(np.int64), g.starts) > 0
    return {"totals": totals, "kept": kept, "masked": masked, "advantages": adv, "dead": dead,
            "kept_groups": kept_groups, "reasons": reasons}


def _summary(r: dict) -> dict:
    adv = r["advantages"]
    return {
        "reward_mean": float(r["totals"].mean()),
        "dead_groups": int(r["dead"].sum()),
        "dead_group_ratio": kit.frac(r["dead"]),
        "kept_trajectories": int(r["kept"].sum()),
        "kept_groups": int(r["kept_groups"].sum()),
        "contributing_trajectories": int((r["kept"] & ~r["masked"]).sum()),
        "nonzero_advantage_frac": kit.frac(np.abs(adv) > 1e-12),
        "advantage_abs_mean": float(np.abs(adv).mean()),
        "drop_reasons": dict(sorted(r["reasons"].items())),
    }


def _sentence(before: dict, after: dict, pred: dict) -> str:
    parts = []
    if before["dead_groups"]:
        parts.append(f"{pred['rescued_dead_groups_frac']:.0%} of dead groups regain non-zero spread "
                     f"({pred['rescued_dead_groups']} of {before['dead_groups']})")
    if pred["newly_dead_groups"]:
        k = pred["newly_dead_groups"]
        parts.append(f"{k} live group{' loses its' if k == 1 else 's lose their'} spread")
    parts.append(f"dead-group ratio {before['dead_group_ratio']:.2f} -> {after['dead_group_ratio']:.2f}")
    parts.append(f"kept trajectories {before['kept_trajectories']} -> {after['kept_trajectories']} ({pred['kept_trajectories_delta']:+d})")
    parts.append(f"trajectories with non-zero advantage {before['nonzero_advantage_frac']:.0%} -> {after['nonzero_advantage_frac']:.0%}")
    return "; ".join(parts)


def backtest(run_dir, change: dict, recipe: dict) -> dict:
    """Predict the effect of `change` (a recipe patch) on the stored rollouts of `run_dir`.

    Returns {"run_dir", "change", "n_trajectories", "n_groups", "before": {...}, "after": {...},
    "prediction": {...}, "message": "<one sentence>", "notes": [...]}.
    """
    run = RunArtifacts(run_dir)
    recipe = recipe or {}
    _check_change(change, recipe)
    table = run.rollouts
    if table is None or table.num_rows == 0:
        raise HarnessError(f"{run.run_dir}: no rollouts.parquet to replay; backtests need a trained run")
    stored = kit.components(table)
    candidate = merge_patch(recipe, change)
    _require_components(candidate, stored, "the change", run.run_dir)
    try:
        _require_components(recipe, stored, "the run's recipe", run.run_dir)
    except HarnessError as exc:
        raise HarnessError(f"{exc}; pass the recipe the run trained with") from None

    g = kit.group_index(kit.col(table, "step"), kit.col(table, "group"))
    flags_cache: dict = {}
    before_r = replay(table, recipe, g, flags_cache)
    after_r = replay(table, candidate, g, flags_cache)
    notes = []
    if kit.has(table, "reward"):
        mismatch = np.abs(before_r["totals"] - kit.col(table, "reward", np.float64)) > 1e-9
        if mismatch.any():
            notes.append(f"{mismatch.mean():.0%} of stored totals differ from the recipe's terms replayed; "
                         "the recipe given may not be the one the run trained with")
    before, after = _summary(before_r), _summary(after_r)
    rescued = before_r["dead"] & ~after_r["dead"]
    prediction = {
        "dead_group_ratio_delta": after["dead_group_ratio"] - before["dead_group_ratio"],
        "rescued_dead_groups": int(rescued.sum()),
        "rescued_dead_groups_frac": float(rescued.sum() / before["dead_groups"]) if before["dead_groups"] else 0.0,
        "newly_dead_groups": int((~before_r["dead"] & after_r["dead"]).sum()),
        "kept_trajectories_delta": after["kept_trajectories"] - before["kept_trajectories"],
        "kept_groups_delta": after["kept_groups"] - before["kept_groups"],
        "nonzero_advantage_frac_delta": after["nonzero_advantage_frac"] - before["nonzero_advantage_frac"],
        "reward_mean_delta": after["reward_mean"] - before["reward_mean"],
    }
    return {
        "run_dir": str(run.run_dir),
        "change": change,
        "n_trajectories": table.num_rows,
        "n_groups": g.n_groups,
        "before": before,
        "after": after,
        "prediction": prediction,
        "message": _sentence(before, after, prediction),
        "notes": notes,
    }
