"""Load, validate and normalise recipes (the policy-side object that evolves).

A recipe is YAML validated by `evo/schemas/recipe.schema.json`. `load_recipe`
returns a plain dict with every default filled in, so downstream code never
guesses. Errors name the file, the YAML path, the bad value and the fix.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

from evo.errors import ConfigError
from evo.schemas import load_schema, validate
from evo.yamlio import display_path, load_yaml, parse_yaml


def fill_defaults(instance: Any, schema: dict) -> Any:
    """Recursively add schema `default`s for missing object keys."""
    if not isinstance(instance, dict) or schema.get("type") != "object":
        if isinstance(instance, list) and isinstance(schema.get("items"), dict):
            return [fill_defaults(x, schema["items"]) for x in instance]
        return instance
    out = dict(instance)
    for key, sub in schema.get("properties", {}).items():
        if key not in out:
            if "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            elif sub.get("type") == "object" and "properties" in sub and not sub.get("required"):
                out[key] = fill_defaults({}, sub)
        else:
            out[key] = fill_defaults(out[key], sub)
    return out


def with_defaults(data: dict) -> dict:
    """A recipe, possibly partial (a backtest's, a test's), with the schema's defaults filled and nothing
    validated: code reads every setting with its default from here, the schema the one place it is written."""
    return fill_defaults(data, load_schema("recipe"))


DEFAULT_REWARD_TERMS = [{"name": "correctness", "weight": 1.0, "mode": "add"}]

# What one training step may generate. Each field has its own schema maximum, but
# their product is what is allocated (token buffers are trajectories x tokens), so
# it is bounded too: 65,536 trajectories is 4x a large published run (1,024 prompts
# x 16), and 2^30 tokens is ~8 GiB of int64 token ids before any activations.
MAX_TRAJECTORIES_PER_STEP = 65_536
MAX_TOKENS_PER_STEP = 2**30


def _check_step_size(rollout: dict, source: str) -> None:
    trajectories = rollout["prompts_per_step"] * rollout["num_generations"]
    if trajectories > MAX_TRAJECTORIES_PER_STEP:
        raise ConfigError(
            f"{source}: rollout.prompts_per_step x rollout.num_generations: {rollout['prompts_per_step']} x "
            f"{rollout['num_generations']} = {trajectories:,} trajectories per step is above {MAX_TRAJECTORIES_PER_STEP:,}; "
            "lower one of them")
    tokens = trajectories * (rollout.get("max_total_tokens") or rollout["max_new_tokens"])
    if tokens > MAX_TOKENS_PER_STEP:
        which = "max_total_tokens" if rollout.get("max_total_tokens") else "max_new_tokens"
        raise ConfigError(
            f"{source}: rollout.{which}: {rollout[which]:,} tokens x {trajectories:,} trajectories = {tokens:,} tokens "
            f"per step is above {MAX_TOKENS_PER_STEP:,}; lower rollout.{which}, prompts_per_step or num_generations")


def normalize_recipe(data: dict, *, source: str = "recipe.yaml") -> dict:
    """Validate `data` and return a copy with all defaults filled."""
    validate(data, "recipe", source=source)
    recipe = with_defaults(data)
    recipe["domain"].setdefault("options", {})
    if "terms" not in recipe["reward"]:
        recipe["reward"]["terms"] = copy.deepcopy(DEFAULT_REWARD_TERMS)
    recipe["rollout"].setdefault("max_total_tokens", None)
    g = recipe["grpo"]
    if g["eps_high"] < g["eps_low"]:
        raise ConfigError(
            f"{source}: grpo.eps_high: {g['eps_high']!r} is below grpo.eps_low {g['eps_low']!r}; "
            f"Clip-Higher needs eps_high >= eps_low, so raise eps_high to {g['eps_low']!r} or more (paper: 0.20 / 0.27)"
        )
    _check_step_size(recipe["rollout"], source)
    names = [t["name"] for t in recipe["reward"]["terms"]]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ConfigError(f"{source}: reward.terms: component {sorted(dup)[0]!r} is listed twice; keep one entry")
    if not any(t["mode"] == "add" for t in recipe["reward"]["terms"]):
        raise ConfigError(f"{source}: reward.terms: no 'add' term; gates and factors multiply a sum, so add one (e.g. correctness)")
    return recipe


def load_recipe(path: str | Path) -> dict:
    """Read, validate and normalise the recipe file `path`; errors name the file as given."""
    source = display_path(path)
    return normalize_recipe(load_yaml(path, source=source), source=source)


def parse_recipe(text: str, *, source: str = "recipe.yaml") -> dict:
    return normalize_recipe(parse_yaml(text, source=source), source=source)


def recipe_hash(recipe: dict) -> str:
    """Stable short hash of a normalised recipe (ordering-independent)."""
    blob = json.dumps(recipe, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def get_path(recipe: dict, dotted_path: str, default: Any = None) -> Any:
    """Read `grpo.eps_high`-style paths from a recipe dict."""
    node: Any = recipe
    for part in dotted_path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return default
    return node


def set_path(recipe: dict, dotted_path: str, value: Any) -> dict:
    """Return a deep copy of `recipe` with `dotted_path` set to `value` (creating mappings)."""
    out = copy.deepcopy(recipe)
    node = out
    parts = dotted_path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"recipe: {dotted_path}: {part!r} is not a mapping; cannot set a key under it")
    node[parts[-1]] = value
    return out


_MISSING = object()


def leaf_diff(before: Any, after: Any, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Dotted path -> (before, after) for every leaf that differs; a missing side is None.

    The one recipe diff (the guard, the heuristic, `evo diff`). Lists are leaves
    (`reward.terms` changes as one value); 8 and 8.0 are the same value.
    """
    if isinstance(before, dict) and isinstance(after, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for key in list(before) + [k for k in after if k not in before]:
            path = f"{prefix}.{key}" if prefix else str(key)
            out.update(leaf_diff(before.get(key, _MISSING), after.get(key, _MISSING), path))
        return out
    if before is _MISSING and after is _MISSING:
        return {}
    if before is _MISSING or after is _MISSING or before != after or type(before) is not type(after):
        if before == after and {type(before), type(after)} <= {int, float}:
            return {}  # 8 vs 8.0 is not a change a user would call one
        return {prefix: (None if before is _MISSING else before, None if after is _MISSING else after)}
    return {}
