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


def get_environment(name: str, options: dict | None = None):
    """Build the environment for domain `name` with the recipe's `domain.options`."""
    if name not in _DOMAINS:
        raise ConfigError(f"recipe.yaml: domain.name: {name!r} is not a known domain; use one of {', '.join(available_domains())}")
    module_name, cls_name = _DOMAINS[name].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    accepted = list(inspect.signature(cls).parameters)
    unknown = sorted(set(options or {}) - set(accepted))
    if unknown:
        raise ConfigError(f"recipe.yaml: domain.options.{unknown[0]}: not an option of the {name} domain; "
                          f"use one of {', '.join(accepted)}")
    try:
        return cls(**(options or {}))
    except TypeError as exc:
        raise ConfigError(f"recipe.yaml: domain.options: {exc}; see the {name} domain's documented options") from None
