"""JSON Schemas for every structured file and record, and one validator.

Schemas live next to this module as `<name>.schema.json`. `validate` reports the
first violation as one line: source, the dotted path (`grpo.num_generations`),
the bad value, and what would fix it.

Two rules hold for every schema, so no schema has to repeat them per field:
- numbers are finite: NaN and +-inf pass every JSON Schema bound (`nan >= 0` and
  `nan <= 1` are both false, so `minimum`/`maximum` never fire), and a NaN
  reward weight or gate threshold silently disables what it configures;
- `integer` means an integer, not an integral float: YAML 1.2 reads `1e3` as a
  float, and code that gets 1000.0 for a step count fails far from the file.
"""

from __future__ import annotations

import json
import math
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


def _is_integer(_checker, instance) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _compile(schema: dict) -> jsonschema.protocols.Validator:
    base = jsonschema.validators.validator_for(schema)
    base.check_schema(schema)
    cls = jsonschema.validators.extend(base, type_checker=base.TYPE_CHECKER.redefine("integer", _is_integer))
    return cls(schema)


@lru_cache(maxsize=None)
def _validator(name: str) -> jsonschema.protocols.Validator:
    return _compile(load_schema(name))


def first_non_finite(instance: Any) -> tuple[list, float] | None:
    """(path, value) of the first NaN or infinite number in `instance`, or None."""
    stack: list[tuple[list, Any]] = [([], instance)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, float):
            if not math.isfinite(node):
                return path, node
        elif isinstance(node, dict):
            stack.extend((path + [k], v) for k, v in reversed(list(node.items())))
        elif isinstance(node, (list, tuple)):
            stack.extend((path + [i], v) for i, v in reversed(list(enumerate(node))))
    return None


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
    if v == "exclusiveMaximum":
        return f"set it below {err.validator_value}"
    if v in ("minItems", "maxItems"):
        return f"give {'at least' if v == 'minItems' else 'at most'} {err.validator_value} items"
    if v in ("minLength", "maxLength"):
        return f"give {'at least' if v == 'minLength' else 'at most'} {err.validator_value} characters"
    if v == "const":
        return f"set it to {err.validator_value!r}"
    if v == "type":
        wanted = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        if "integer" in wanted and isinstance(err.instance, float) and err.instance.is_integer():
            return f"write it as an integer: {int(err.instance)}"
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
    return f"{source}: {where}: {_short(repr(err.instance))} is invalid ({_short(err.message)}); {_fix_hint(err)}"


def _short(text: str, limit: int = 120) -> str:
    """One line, at most `limit` characters: a 5,000-item list must not become a 5,000-item message."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def validate(instance: Any, name: str, *, source: str, error_cls=ConfigError) -> Any:
    """Validate `instance` against schema `name`; raise `error_cls` with one line on failure."""
    return _check(instance, _validator(name), source, error_cls)


def _check(instance: Any, validator: jsonschema.protocols.Validator, source: str, error_cls) -> Any:
    bad = first_non_finite(instance)
    if bad is not None:
        path, value = bad
        raise error_cls(f"{source}: {dotted(path)}: {value!r} is not a finite number; give a finite value")
    # best_match picks the most specific error of the most relevant branch.
    err = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if err is not None:
        raise error_cls(format_error(err, source))
    return instance
