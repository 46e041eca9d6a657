"""JSON Schemas for every structured file and record, and one validator.

Schemas live next to this module as `<name>.schema.json`. `validate` reports the
first violation as one line: source, the dotted path (`grpo.num_generations`),
the bad value, and what would fix it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from evo.errors import ConfigError

_DIR = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    path = _DIR / f"{name}.schema.json"
    if not path.exists():
        raise ConfigError(f"no schema named {name!r} (looked for {path})")
    return json.loads(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def _validator(name: str) -> jsonschema.protocols.Validator:
    schema = load_schema(name)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def dotted(path) -> str:
    parts = []
    for p in path:
        parts.append(f"[{p}]" if isinstance(p, int) else ("." if parts else "") + str(p))
    return "".join(parts) or "(top level)"


def _fix_hint(err: jsonschema.ValidationError) -> str:
    v = err.validator
    if v == "enum":
        return "use one of " + ", ".join(repr(x) for x in err.validator_value)
    if v == "minimum":
        return f"set it to {err.validator_value} or more"
    if v == "maximum":
        return f"set it to {err.validator_value} or less"
    if v == "exclusiveMinimum":
        return f"set it above {err.validator_value}"
    if v == "type":
        return f"give a value of type {err.validator_value}"
    if v == "required":
        return "add the missing key"
    if v == "additionalProperties":
        return "remove it or check its spelling"
    if v == "pattern":
        return f"match the pattern {err.validator_value!r}"
    description = err.schema.get("description")
    return f"see the schema: {description}" if description else "fix the value"


def format_error(err: jsonschema.ValidationError, source: str) -> str:
    where = dotted(err.absolute_path)
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        key = f"{where}.{missing}" if err.absolute_path else missing
        return f"{source}: {key}: required key is missing; add it"
    if err.validator == "additionalProperties":
        extra = err.message.split("'")[1] if "'" in err.message else err.message
        key = f"{where}.{extra}" if err.absolute_path else extra
        return f"{source}: {key}: unknown key; remove it or check its spelling"
    return f"{source}: {where}: {err.instance!r} is invalid ({err.message}); {_fix_hint(err)}"


def validate(instance: Any, name: str, *, source: str, error_cls=ConfigError) -> Any:
    """Validate `instance` against schema `name`; raise `error_cls` with one line on failure."""
    # best_match picks the most specific error of the most relevant branch.
    err = jsonschema.exceptions.best_match(_validator(name).iter_errors(instance))
    if err is not None:
        raise error_cls(format_error(err, source))
    return instance
