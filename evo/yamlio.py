"""Read YAML files with one-line errors that name the file and the position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from evo.errors import ConfigError


def load_yaml(path: str | Path, *, expect_mapping: bool = True) -> Any:
    """Parse `path`; raise ConfigError naming the file, line and fix on failure."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    return parse_yaml(text, source=str(path), expect_mapping=expect_mapping)


def parse_yaml(text: str, *, source: str, expect_mapping: bool = True) -> Any:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source}:{where}: malformed YAML ({problem}); fix the syntax there") from None
    if expect_mapping and not isinstance(data, dict):
        kind = type(data).__name__ if data is not None else "an empty document"
        raise ConfigError(f"{source}: expected a mapping of keys at the top level, found {kind}")
    return data


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
