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


TASK_FILE_OPTIONS = ("train_file", "validation_file", "files")


def available_domains() -> list[str]:
    return sorted(_DOMAINS)


def get_environment(name: str, options: dict | None = None):
    """Build the environment for domain `name` with the recipe's `domain.options`."""
    if name not in _DOMAINS:
        raise ConfigError(f"recipe.yaml: domain.name: {name!r} is not a known domain; use one of {', '.join(available_domains())}")
    module_name, cls_name = _DOMAINS[name].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    accepted = [p for p in inspect.signature(cls).parameters]
    unknown = sorted(set(options or {}) - set(accepted))
    if unknown:
        raise ConfigError(f"recipe.yaml: domain.options.{unknown[0]}: not an option of the {name} domain; "
                          f"use one of {', '.join(accepted)}")
    try:
        return cls(**(options or {}))
    except TypeError as exc:
        raise ConfigError(f"recipe.yaml: domain.options: {exc}; see the {name} domain's documented options") from None


def check_options(name: str, options: dict | None, *, source: str = "recipe.yaml") -> None:
    """Build the domain's environment once, so a bad `domain.options` (an unknown key, `max_turns: 0`) fails
    where the recipe is read — `evo init`, `evo validate`, an agent's candidate — and not at the first training
    step, after v0 was committed. The task-file options are left out: a relative path resolves in the workspace,
    where the run reads it (and says so if it is missing). Errors name `source`."""
    checked = {k: v for k, v in (options or {}).items() if k not in TASK_FILE_OPTIONS}
    try:
        get_environment(name, checked)
    except ConfigError as exc:
        message = str(exc)
        if source != "recipe.yaml" and message.startswith("recipe.yaml:"):
            message = source + message[len("recipe.yaml"):]
        raise ConfigError(message) from None
