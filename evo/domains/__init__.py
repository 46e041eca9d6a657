"""Domain registry. Domains load lazily: `get_environment("code", options)`."""

from __future__ import annotations

import importlib
import inspect

from evo.errors import ConfigError

_DOMAINS = {
    "arithmetic": "evo.domains.arithmetic:ArithmeticEnv",
    "math": "evo.domains.math:MathEnv",
    "code": "evo.domains.code:CodeEnv",
    "swe": "evo.domains.swe:SweEnv",
    "calc": "evo.domains.calc:CalcEnv",
    "patch": "evo.domains.patch:PatchEnv",
}


def available_domains() -> list[str]:
    return sorted(_DOMAINS)


def _domain_class(name: str):
    module_name, cls_name = _DOMAINS[name].split(":")
    return getattr(importlib.import_module(module_name), cls_name)


def option_defaults(name: str) -> dict:
    """The scalar options domain `name` takes when a recipe leaves them out (its constructor's defaults).

    What a recipe omits is still a setting the episode runs under: calc's
    three turns bind a policy whether or not the recipe says `max_turns: 3`.
    Readers that reason about a recipe (the heuristic's skill requirements, the
    loop's limit walk, the analyzers) see these filled in. None-valued defaults
    and structured ones are left out; a default the domain computes from other
    options (math's turn limit, 4 with the interpreter) comes from its class's
    `computed_defaults(options)`, read by `with_option_defaults`.
    """
    if name not in _DOMAINS:
        return {}
    return {key: p.default for key, p in inspect.signature(_domain_class(name)).parameters.items()
            if isinstance(p.default, (bool, int, float, str))}


def with_option_defaults(recipe: dict) -> dict:
    """A copy of the normalised `recipe` whose `domain.options` also hold the domain's defaults it leaves out
    (the recipe itself where it names no known domain)."""
    domain = recipe.get("domain") or {}
    if domain.get("name") not in _DOMAINS:
        return recipe
    named = domain.get("options") or {}
    computed = getattr(_domain_class(domain["name"]), "computed_defaults", None)  # defaults that depend on options
    options = {**option_defaults(domain["name"]), **(computed(named) if computed else {}), **named}
    return {**recipe, "domain": {**domain, "options": options}}


def get_environment(name: str, options: dict | None = None):
    """Build the environment for domain `name` with the recipe's `domain.options`."""
    if name not in _DOMAINS:
        raise ConfigError(f"recipe.yaml: domain.name: {name!r} is not a known domain; use one of {', '.join(available_domains())}")
    cls = _domain_class(name)
    accepted = list(inspect.signature(cls).parameters)
    unknown = sorted(set(options or {}) - set(accepted))
    if unknown:
        raise ConfigError(f"recipe.yaml: domain.options.{unknown[0]}: not an option of the {name} domain; "
                          f"use one of {', '.join(accepted)}")
    try:
        return cls(**(options or {}))
    except TypeError as exc:
        raise ConfigError(f"recipe.yaml: domain.options: {exc}; see the {name} domain's documented options") from None
