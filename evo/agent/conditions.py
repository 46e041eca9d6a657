"""Skill conditions and recipe patches: the small language skills are written in.

A *trigger* is a condition on a diagnostic metric (`behavior/truncated_frac > 0.05`);
a *requirement* is a condition on the parent's recipe (`reward.terms lacks_term
partial_credit`); a *patch* is a list of recipe operations (`set`, `scale`,
`add_term`, `drop_term`, `enable`); a `scale` takes a fixed factor (`value`) or
one read from the diagnosis (`toward: {metric, target, power}`: the factor
`(target / metric) ** power` that would bring the metric to its target, where
the metric goes as the scaled setting to the power `1 / power`). Triggers and requirements all must hold; `{any: [...]}`
groups alternatives and `{all: [...]}` a conjunction inside one. A condition on a metric the diagnosis lacks does not hold,
and is reported as missing so the heuristic can install the analyzer that
measures it.

Evidence strength of a trigger that holds is how far past its threshold the
metric sits, on a log scale so that 0.62 against 0.05 and 6.2 against 0.5 weigh
the same: ``clip(|ln(value / threshold)|, 0, 2)`` (``clip(|value - threshold|, 0, 2)``
when either is not positive; 1 for `==`/`!=`). Conditions
marked `gate: true` ("ample length") only gate; they add no strength.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from evo.domains import with_option_defaults
from evo.errors import AgentError
from evo.recipe import get_path, leaf_diff, normalize_recipe, set_path

_COMPARE = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
TERM_OPS = ("has_term", "lacks_term")
PATCH_OPS = ("set", "scale", "add_term", "drop_term", "enable")


def _margin(op: str, value: float, threshold: Any) -> float:
    if op in ("==", "!=") or not isinstance(threshold, (int, float)) or isinstance(threshold, bool):
        return 1.0
    if threshold > 0 and value > 0:
        return min(abs(math.log(value / threshold)), 2.0)
    return min(abs(value - threshold), 2.0)


def eval_trigger(cond: dict, metrics: dict) -> tuple[bool, float, list[str], dict[str, float]]:
    """Evaluate one trigger: (holds, strength, missing metric keys, metric values used).

    `{all: [...]}` holds when every member does (strength: their mean over
    non-gate members), `{any: [...]}` when one does (strength: the strongest).
    A condition marked `optional` holds where its metric is absent (e.g. "turns are ample" in a
    single-turn domain, whose diagnosis has no turn counts); a metric present but not a number still fails.
    """
    if "all" in cond:
        return eval_triggers(cond["all"], metrics)
    if "any" in cond:
        best: tuple[bool, float, list[str], dict[str, float]] = (False, 0.0, [], {})
        missing: list[str] = []
        for sub in cond["any"]:
            holds, strength, sub_missing, used = eval_trigger(sub, metrics)
            missing += sub_missing
            if holds and (not best[0] or strength > best[1]):
                best = (True, strength, [], used)
        return (best[0], best[1], [] if best[0] else missing, best[3])
    key, op, threshold = cond["metric"], cond["op"], cond["value"]
    value = metrics.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or (isinstance(value, float) and math.isnan(value)):
        if cond.get("optional") and key not in metrics:  # a measure this domain does not produce: nothing to bar
            return True, 0.0, [], {}
        return False, 0.0, [key], {}
    holds = _COMPARE[op](value, threshold)
    strength = 0.0 if (not holds or cond.get("gate")) else _margin(op, float(value), threshold)
    return holds, strength, [], {key: value}


def eval_triggers(triggers: list[dict], metrics: dict) -> tuple[bool, float, list[str], dict[str, float]]:
    """All triggers must hold. Strength = mean over non-gate triggers. An empty list never fires.

    Missing metrics are reported only when they are what blocks the skill: if a
    measured condition already fails, measuring the rest would not change the answer.
    """
    if not triggers:
        return False, 0.0, [], {}
    all_hold, refuted_by_measurement, strengths, missing, used = True, False, [], [], {}
    for cond in triggers:
        holds, strength, cond_missing, cond_used = eval_trigger(cond, metrics)
        all_hold &= holds
        refuted_by_measurement |= not holds and not cond_missing
        missing += cond_missing
        used.update(cond_used)
        if not cond.get("gate"):
            strengths.append(strength)
    mean = sum(strengths) / len(strengths) if strengths else 0.0
    return all_hold, (mean if all_hold else 0.0), ([] if refuted_by_measurement else missing), used


def trigger_distance(triggers: list[dict], metrics: dict) -> float | None:
    """How far a skill's triggers sit from firing on `metrics`, on the strength's scale; None when a gate fails.

    The exploration order (`evo.agent.heuristic`, phase "explore"): when no
    lever's trigger fires and continuing the recipe stopped paying, the lever
    whose evidence came nearest is the first tried. A condition that holds is
    0 away; one that fails is `clip(|ln(value / threshold)|, 0, 2)` away (1
    for `==`/`!=`), the margin its strength would have had on the other side;
    a metric the diagnosis lacks, or one at or below 0 against a positive threshold, is the full 2. `{any}` is its nearest member,
    a list or `{all}` the mean over its non-gate members. A failing gate ("length is
    ample") means the skill does not apply at all, however near the rest.
    """
    if not triggers:
        return None
    distances = []
    for cond in triggers:
        if cond.get("gate"):  # a gate adds no distance: it holds, or the skill does not apply
            if not eval_trigger(cond, metrics)[0]:
                return None
            continue
        if "all" in cond:
            d = trigger_distance(cond["all"], metrics)
        elif "any" in cond:
            members = [trigger_distance([sub], metrics) for sub in cond["any"]]
            members = [m for m in members if m is not None]
            d = min(members) if members else None
        else:
            holds, _, missing, _ = eval_trigger(cond, metrics)
            if holds:
                d = 0.0
            elif missing:
                d = 2.0
            else:
                value, threshold = float(metrics[cond["metric"]]), cond["value"]
                positive = isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and threshold > 0
                # 0 against a positive threshold is no ratio away, not |0 - threshold|: nothing of it was measured
                d = 2.0 if positive and value <= 0 else _margin(cond["op"], value, threshold)
        if d is None:
            return None
        distances.append(d)
    return sum(distances) / len(distances) if distances else 0.0


def _term_matches(term: dict, pattern: dict) -> bool:
    return all(term.get(k, {"weight": 1.0, "mode": "add"}.get(k)) == v for k, v in pattern.items())


def recipe_view(raw: dict, *, source: str = "recipe.yaml") -> dict:
    """The recipe the conditions read: normalised, with the domain's option defaults filled in.

    A key the file leaves out still binds the episodes (calc without
    `max_turns` runs three turns), so a skill's requirement and a patch's
    current value see it.
    """
    return with_option_defaults(normalize_recipe(raw, source=source))


def check_requirement(cond: dict, recipe: dict) -> bool:
    """A condition on the recipe: comparisons on a dotted path, or has_term / lacks_term on reward.terms."""
    if "any" in cond:
        return any(check_requirement(sub, recipe) for sub in cond["any"])
    op = cond["op"]
    value = get_path(recipe, cond["path"])
    if op in TERM_OPS:
        pattern = cond["value"] if isinstance(cond["value"], dict) else {"name": cond["value"]}
        present = any(_term_matches(t, pattern) for t in (value or []))
        return present if op == "has_term" else not present
    if value is None:
        return False
    try:
        return bool(_COMPARE[op](value, cond["value"]))
    except TypeError:
        return False


def _scale_factor(op: dict, metrics: dict | None, source: str) -> float:
    """A `scale` op's factor: its `value`, or `(target / metric) ** power` for `toward: {metric, target, power}`."""
    toward = op.get("toward")
    if toward is None:
        return op["value"]
    name = toward.get("metric")
    value = (metrics or {}).get(name)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise AgentError(f"{source}: cannot scale {op.get('path')} toward {name}: the diagnosis gives it as {value!r}, "
                         "not a positive number")
    return (float(toward["target"]) / float(value)) ** float(toward.get("power", 1.0))


def apply_patch(raw: dict, recipe: dict, patch: list[dict], *, source: str = "patch", metrics: dict | None = None) -> dict:
    """Apply `patch` to the raw recipe mapping (what recipe.yaml holds) and return the new mapping.

    Current values are read from the normalised `recipe` (with the domain's
    option defaults, `evo.domains.with_option_defaults`), so `scale` works on a
    key the file leaves to its default. Only the touched keys are written, so
    the file stays as short as the user wrote it. `metrics`: the diagnosis a
    `scale ... toward` op reads its factor from.
    """
    out = copy.deepcopy(raw)
    for op in patch:
        kind, path = op.get("op"), op.get("path")
        if kind not in PATCH_OPS or not path:
            raise AgentError(f"{source}: patch op {op!r} is invalid; use one of {', '.join(PATCH_OPS)} with a path")
        current = get_path(recipe, path)
        if kind == "set":
            out = set_path(out, path, copy.deepcopy(op["value"]))
        elif kind == "scale":
            if not isinstance(current, (int, float)) or isinstance(current, bool):
                raise AgentError(f"{source}: cannot scale {path} (value {current!r} is not a number)")
            new = current * _scale_factor(op, metrics, source)
            if "toward" in op:  # a factor read from a measurement: three significant digits are all it carries
                new = float(f"{new:.3g}")
            if "max" in op:
                new = min(new, op["max"])
            if "min" in op:
                new = max(new, op["min"])
            new = int(round(new)) if isinstance(current, int) else float(new)
            if new == current:
                continue  # unchanged: a key the file leaves to its default stays unwritten
            out = set_path(out, path, new)
        elif kind == "add_term":
            term = {"weight": 1.0, "mode": "add", **op["value"]}
            terms = [dict(t) for t in (current or [])]
            for i, t in enumerate(terms):
                if t["name"] == term["name"]:
                    terms[i] = term
                    break
            else:
                terms.append(term)
            out = set_path(out, path, terms)
        elif kind == "drop_term":  # every term matching the pattern (a name, or {name, mode, ...})
            pattern = op["value"] if isinstance(op.get("value"), dict) else {"name": op.get("value")}
            out = set_path(out, path, [dict(t) for t in (current or []) if not _term_matches(t, pattern)])
        elif kind == "enable":
            node = get_path(out, path)
            node = dict(node) if isinstance(node, dict) else {}
            node.update(copy.deepcopy(op.get("value") or {}))
            node["enabled"] = True
            out = set_path(out, path, node)
    return out


def term_added(before: dict, after: dict, pattern: dict) -> bool:
    """Whether `after` has a reward term matching `pattern` that `before` lacks (for refutations)."""
    had = any(_term_matches(t, pattern) for t in get_path(before, "reward.terms", []) or [])
    has = any(_term_matches(t, pattern) for t in get_path(after, "reward.terms", []) or [])
    return has and not had


def patched(raw: dict, current: dict, patch: list[dict], *, source: str,
            metrics: dict | None = None) -> tuple[dict, dict, dict]:
    """(raw recipe with `patch` applied, its view, its leaf diff from `current`): what a skill's patch makes of a recipe.

    Raises AgentError / ConfigError when the patch cannot apply or its result is not a valid recipe.
    """
    new_raw = apply_patch(raw, current, patch, source=source, metrics=metrics)
    new = recipe_view(new_raw, source=f"recipe.yaml patched by {source}")
    return new_raw, new, leaf_diff(current, new)
