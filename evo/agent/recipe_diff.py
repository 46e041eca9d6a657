"""Compare two recipes key by key, and say what changed in one readable line.

Both the heuristic (to name its factor and change) and the candidate guard (to
check that the declared factor matches the diff) use the same leaf diff
(`evo.recipe.leaf_diff`, which `evo diff` uses too), so a proposal that the
heuristic makes always passes the guard's factor check.
"""

from __future__ import annotations

from typing import Any

from evo.recipe import leaf_diff  # noqa: F401 - the one recipe diff, re-exported for the agent side


def covers(factor: str, path: str) -> bool:
    """Whether a change at recipe `path` is part of the declared `factor` (same key or under it)."""
    return path == factor or path.startswith(factor + ".")


def common_factor(paths: list[str]) -> str:
    """The deepest dotted prefix shared by all `paths` (`filters` for std_group + anomaly)."""
    if not paths:
        return ""
    split = [p.split(".") for p in paths]
    shared = []
    for parts in zip(*split):
        if len(set(parts)) != 1:
            break
        shared.append(parts[0])
    return ".".join(shared)


def format_value(value: Any) -> str:
    """Compact text: reward terms as `correctness(add 1.0) + partial_credit(add 0.5)`."""
    if isinstance(value, list) and value and all(isinstance(t, dict) and "name" in t for t in value):
        return " + ".join(f"{t['name']}({t.get('mode', 'add')} {t.get('weight', 1.0)})" for t in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "unset"
    if isinstance(value, (list, dict)):
        import json

        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def format_change(diff: dict[str, tuple[Any, Any]]) -> str:
    """`rollout.max_new_tokens: 4 → 8; filters.std_group.enabled: false → true` (sorted, deterministic)."""
    return "; ".join(f"{path}: {format_value(a)} → {format_value(b)}" for path, (a, b) in sorted(diff.items()))
