"""Combine a domain's reward components into the scalar reward a recipe trains on.

    total = (Σ_{mode=add} weight · c) × Π_{mode=gate} 1[c > 0] × Π_{mode=factor} c

Every component is stored per trajectory in rollouts.parquet (`reward/<name>`),
so a backtest can recombine them under different `reward.terms` with these same
functions, without generating again. Besides the domain's components, a recipe
with `reward.model_judge` has `model_judge`, a judge model's rubric score
(`evo.train.judge_model`).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from evo.errors import ConfigError


def check_terms(terms: Sequence[Mapping], available: Sequence[str], *, source: str = "recipe.yaml") -> None:
    """Raise ConfigError when a term names a component the domain does not emit."""
    for i, term in enumerate(terms):
        if term["name"] == "model_judge" and term["name"] not in available:
            raise ConfigError(f"{source}: reward.terms[{i}].name: 'model_judge' is scored by a judge model; set "
                              "reward.model_judge (a rubric file and an endpoint or a local model) to train on it")
        if term["name"] not in available:
            raise ConfigError(
                f"{source}: reward.terms[{i}].name: {term['name']!r} is not a component this domain emits; "
                f"use one of {', '.join(available)}"
            )


def total_reward(components: Mapping[str, float], terms: Sequence[Mapping]) -> float:
    """The total reward of one trajectory from its components."""
    added = 0.0
    multiplier = 1.0
    for term in terms:
        value = float(components[term["name"]])
        mode = term.get("mode", "add")
        if mode == "add":
            added += float(term.get("weight", 1.0)) * value
        elif mode == "gate":
            multiplier *= 1.0 if value > 0 else 0.0
        elif mode == "factor":
            multiplier *= value
        else:
            raise ConfigError(f"recipe.yaml: reward.terms: mode {mode!r} of {term['name']!r} is not add, gate or factor")
    return added * multiplier


def total_rewards(columns: Mapping[str, Sequence[float]], terms: Sequence[Mapping]) -> list[float]:
    """Column form: `columns[name][i]` is component `name` of trajectory i."""
    names = [t["name"] for t in terms]
    missing = [n for n in names if n not in columns]
    if missing:
        raise ConfigError(f"reward.terms: component {missing[0]!r} is not among the stored components "
                          f"({', '.join(sorted(columns))})")
    n = len(columns[names[0]]) if names else 0
    return [total_reward({name: columns[name][i] for name in names}, terms) for i in range(n)]
