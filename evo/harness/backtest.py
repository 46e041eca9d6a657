"""Backtests: replay a run's stored rollouts under a candidate reward or filter change.

Every reward component is stored per trajectory (`reward/<component>`; a
`model_judge` score too), so a change to `reward.terms`, `filters.*` or the
objective's `grpo.scale_advantage_by_std`, `grpo.advantage_std` and
`grpo.loss_aggregation` can be evaluated without generating (or judging)
anything: recombine the totals, re-run the filters (the SNR filter per step,
as training ranks a step's groups), recompute group-normalised advantages and
each trajectory's loss weight, once under the run's recipe ("before") and once
under the patched recipe ("after"), then report the predicted effect as numbers
and one sentence — e.g. "45% of dead groups regain non-zero spread" (paper
D.3), or for an aggregation change the share of the policy-gradient weight that
responses longer than their step's median carry.

The replay calls the training code itself (`evo.train.rewards`,
`evo.train.filters`, `evo.train.objective`), so a backtest and a real run can
never disagree on what a reward term or a filter means. Limits: in multi-turn
domains `completion_tokens` includes observation tokens, so the
`repeated_ngram` rule sees slightly more tokens than training did; a change to
generation (`rollout.*`, the model, the data) cannot be replayed, and neither
can dynamic sampling (`filters.std_group.refill`, `max_generation_batches`):
it samples prompt batches the stored rollouts do not hold, so its backtest
says so and estimates the batches a step would need from the stored share of
live groups. A run that refilled is replayed over every batch it sampled
(the trim to `prompts_per_step` live groups is not replayed).
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from evo.errors import ConfigError, HarnessError
from evo.harness import kit
from evo.harness.context import RunArtifacts
from evo.recipe import DEFAULT_REWARD_TERMS, get_path
from evo.recipe_spec import Grpo, Rollout, section

REPLAYABLE = {"reward": None, "filters": None,
              "grpo": {"scale_advantage_by_std", "advantage_std", "loss_aggregation"}}
NOT_REPLAYED = ("refill", "max_generation_batches")  # filters.std_group keys that change what is generated
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
    from evo.train.filters import FilterConfig

    needed = [t["name"] for t in _terms(recipe)]
    cfg = FilterConfig.from_recipe(recipe.get("filters"))
    if cfg.std_group and cfg.std_component != "total":
        needed.append(cfg.std_component)
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


def _snr(rows_of: list, decisions: list, values: np.ndarray, steps: np.ndarray, cfg) -> np.ndarray:
    """Apply the SNR filter step by step (it ranks one step's groups); the loss scale of each row's step. (rows,)"""
    from evo.train.filters import snr_decisions, snr_inputs, snr_loss_scale

    scale = np.ones(len(values))
    for step in np.unique(steps):
        members = np.flatnonzero(steps == step)  # groups of this step
        spreads, candidates = snr_inputs([values[rows_of[k]].tolist() for k in members], [decisions[k] for k in members])
        reasons = snr_decisions(spreads, candidates, cfg)
        for k, why in zip(members, reasons):
            for d in decisions[k]:
                if why and d.kept:
                    d.kept, d.masked, d.in_group_stats, d.reason = False, False, False, why
        kept = sum(1 for c, why in zip(candidates, reasons) if c and not why)
        factor = snr_loss_scale(kept, sum(candidates), cfg.snr_loss_scaling)
        for k in members:
            scale[rows_of[k]] = factor
    return scale


def _weights(table, recipe: dict, mode: str, g: kit.GroupIndex, contributes: np.ndarray) -> np.ndarray:
    """Each row's loss weight w_i under aggregation `mode`, normalised within its step (a step is a batch)."""
    import torch

    from evo.train.cost import episode_token_budget, option_turns
    from evo.train.objective import trajectory_weights

    tokens = kit.col(table, "num_tokens", np.int64) if kit.has(table, "num_tokens") else np.ones(table.num_rows, np.int64)
    if (recipe.get("rollout") or {}).get("max_new_tokens"):
        turns = option_turns((recipe.get("domain") or {}).get("options"))
        budget = episode_token_budget(section(Rollout, recipe, "rollout"), turns)
    else:  # a partial recipe without a generation limit: the longest stored response stands in
        budget = max(int(tokens.max(initial=1)), 1)
    steps = kit.col(table, "step", np.int64)
    out = np.zeros(table.num_rows)
    for step in np.unique(steps):
        rows = np.flatnonzero(steps == step)
        out[rows] = trajectory_weights(torch.from_numpy(g.gid[rows]), torch.from_numpy(contributes[rows]), mode=mode,
                                       tokens=torch.from_numpy(tokens[rows]), token_budget=budget).numpy()
    return out


def replay(table, recipe: dict, g: kit.GroupIndex, flags_cache: dict) -> dict:
    """Totals, filter decisions, advantages and loss weights of every stored trajectory under `recipe`."""
    import torch

    from evo.train.filters import FilterConfig, apply_filters
    from evo.train.objective import group_advantages
    from evo.train.rewards import total_rewards

    terms = _terms(recipe)
    columns = {t["name"]: kit.col(table, f"reward/{t['name']}", np.float64).tolist() for t in terms}
    totals = np.asarray(total_rewards(columns, terms), dtype=np.float64)  # (rows,)
    cfg = FilterConfig.from_recipe(recipe.get("filters"))
    grpo = section(Grpo, recipe, "grpo")
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
    scale = np.ones(len(totals))
    if cfg.snr:
        ranked_on = totals if cfg.snr_component == "total" else kit.col(table, f"reward/{cfg.snr_component}", np.float64)
        scale = _snr(rows_of, decisions, ranked_on, g.step, cfg)
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
    adv = group_advantages(torch.from_numpy(totals), torch.from_numpy(g.gid), torch.from_numpy(in_stats),
                           scale_by_std=grpo.scale_advantage_by_std, std=grpo.advantage_std,
                           zero_spread=cfg.std_epsilon).numpy() * scale  # (rows,)
    dead = g.std(totals) <= DEAD_EPSILON  # (groups,)
    kept_groups = np.add.reduceat(kept[g.order].astype(np.int64), g.starts) > 0
    tokens = kit.col(table, "num_tokens", np.int64) if kit.has(table, "num_tokens") else np.ones(len(totals), np.int64)
    weights = _weights(table, recipe, grpo.loss_aggregation, g, kept & ~masked & (tokens > 0))
    return {"totals": totals, "kept": kept, "masked": masked, "advantages": adv, "dead": dead,
            "kept_groups": kept_groups, "reasons": reasons, "weights": weights, "tokens": tokens,
            "loss_scale": float(scale.mean()), "aggregation": grpo.loss_aggregation}


def _length_split(table, r: dict) -> dict:
    """How the policy-gradient weight w_i |A_i| splits between long and short responses (vs their step's median)."""
    steps = kit.col(table, "step", np.int64)
    tokens = r["tokens"].astype(np.float64)
    long = np.zeros(len(tokens), bool)
    live = r["weights"] > 0
    for step in np.unique(steps):
        rows = np.flatnonzero((steps == step) & live)
        if len(rows):
            long[rows] = tokens[rows] > np.median(tokens[rows])
    push = r["weights"] * np.abs(r["advantages"])  # (rows,) the signal each trajectory carries in the loss
    total = float(push.sum())
    per_token = np.where(live, r["weights"] / np.maximum(tokens, 1.0), 0.0)  # (rows,) each token's weight
    short = live & ~long
    ratio = (float(per_token[long].mean() / per_token[short].mean())
             if long.any() and short.any() and per_token[short].mean() > 0 else 1.0)
    return {"long_response_signal_share": float(push[long].sum() / total) if total > 0 else 0.0,
            "long_vs_short_token_weight": ratio}


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
        "loss_aggregation": r["aggregation"],
        "loss_scale_mean": r["loss_scale"],
        **r["length_split"],
    }


def _sentence(before: dict, after: dict, pred: dict) -> str:
    parts = []
    if before["loss_aggregation"] != after["loss_aggregation"]:
        parts.append(f"loss aggregation {before['loss_aggregation']} -> {after['loss_aggregation']}: responses longer "
                     f"than their step's median carry {before['long_response_signal_share']:.0%} -> "
                     f"{after['long_response_signal_share']:.0%} of the policy-gradient weight, and a long response's "
                     f"token weighs {before['long_vs_short_token_weight']:.2f}x -> "
                     f"{after['long_vs_short_token_weight']:.2f}x a short one's")
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
    for r in (before_r, after_r):
        r["length_split"] = _length_split(table, r)
    notes = []
    if kit.has(table, "generation_batch") and table.num_rows and int(kit.col(table, "generation_batch").max()) > 0:
        notes.append("the run refilled its steps (dynamic sampling): the replay sees every generation batch's "
                     "groups; its trim to prompts_per_step live groups is not replayed")
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
    message = _sentence(before, after, prediction)
    refill = _refill_estimate(change, candidate, table, after_r, g)
    if refill:
        prediction["refill"] = refill
        notes.append(refill["why"])
        message = f"{refill['message']}; replayed on the stored batches: {message}"
    return {
        "run_dir": str(run.run_dir),
        "change": change,
        "n_trajectories": table.num_rows,
        "n_groups": g.n_groups,
        "before": before,
        "after": after,
        "prediction": prediction,
        "message": message,
        "notes": notes,
    }


def _refill_estimate(change: dict, candidate: dict, table, after: dict, g: kit.GroupIndex) -> dict | None:
    """Dynamic sampling cannot be replayed; estimate from the stored live-group share what a step would sample."""
    touched = ((change.get("filters") or {}).get("std_group") or {}).keys() & set(NOT_REPLAYED)
    std = (candidate.get("filters") or {}).get("std_group") or {}
    if not touched or not (std.get("enabled") and std.get("refill")):
        return None
    live = after["kept_groups"]  # (groups,) a group that keeps a trajectory under the candidate's filters
    share = kit.frac(live)
    cap = int(std.get("max_generation_batches", 3))
    wanted = int((candidate.get("rollout") or {}).get("prompts_per_step") or round(g.n_groups / max(len(np.unique(g.step)), 1)))
    need = (1.0 / share) if share > 0 else float("inf")
    expected = min(need, float(cap))
    capped = need > cap
    message = (f"refill is not replayable (it samples prompt batches the stored rollouts do not hold); at the stored "
               f"live-group share {share:.0%} a step needs about {need:.1f} generation batches to hold {wanted} live "
               f"groups (cap {cap}{': steps would stop short at about ' + format(share * cap * wanted, '.0f') + ' live groups' if capped else ''})")
    return {"replayable": False, "live_group_share": share, "expected_generation_batches": expected,
            "max_generation_batches": cap, "capped": bool(capped),
            "why": "filters.std_group.refill is not replayed: it generates new prompt batches; the figures are an "
                   "estimate from the stored share of live groups", "message": message}
