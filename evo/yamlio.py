"""The one YAML reader of the project (recipes, evo.yaml, change files, skills' front matter).

Every YAML file EvoTrainer reads goes through `load_yaml` / `parse_yaml`, so
they all follow the same rules and fail the same way: one `ConfigError` line
naming the file, the line and column, the problem and the fix.

Why PyYAML with our own resolvers rather than a YAML 1.2 library (ruamel.yaml):
PyYAML is already a dependency and well kept, and the only part of YAML 1.1 that
hurts here is implicit typing. So `_Loader` keeps PyYAML's safe parser and
replaces its implicit resolvers with the YAML 1.2 *core schema* (the JSON types):

- numbers: `5e-4`, `1e-6`, `.5`, `1.` are floats (1.1 wants a dot and a signed
  exponent, so it reads the commonest way to write a learning rate as a string);
  `017` is 17 (1.1: octal 15), `0o17` octal, `0x1f` hex; `1_000`, `1:30` and
  dates stay strings (1.1: 1000, 90 and a `date` no JSON Schema accepts);
- booleans are only true/false (1.1 also reads yes/no/on/off, the "Norway problem");
- the `<<` merge key is kept: it is not 1.2, but common and harmless.

`dump_yaml` quotes any string that either YAML 1.1 or 1.2 would read as
something else, so what we write reads back the same everywhere.

Beyond the grammar the loader refuses what would otherwise surface as a
traceback or exhaust memory: duplicate keys (YAML says keys are unique; PyYAML
silently keeps the last), binary or non-UTF-8 files, files over `MAX_BYTES`,
nesting deeper than `MAX_DEPTH` (a RecursionError otherwise), and aliases whose
expansion exceeds `MAX_EXPANDED_NODES` or refers to itself (billion laughs and
recursive aliases, which blow up later in validation or `json.dumps`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from evo.errors import ConfigError

MAX_BYTES = 8 * 1024 * 1024  # a recipe or evo.yaml is a few KB; anything this big is not a config file
MAX_DEPTH = 64  # recipes nest about 5 levels deep
MAX_EXPANDED_NODES = 100_000  # nodes after expanding aliases; a recipe has about 100

MERGE_TAG = "tag:yaml.org,2002:merge"

# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), plus `<<`.
_CORE_RESOLVERS = [
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    ("tag:yaml.org,2002:float",
     r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
     list("-+0123456789.")),
    (MERGE_TAG, r"^(?:<<)$", ["<"]),
]


class _Problem(Exception):
    """Raised inside the loader: a position, what is wrong there, and the fix."""

    def __init__(self, mark, problem: str, fix: str):
        super().__init__(problem)
        self.mark, self.problem, self.fix = mark, problem, fix


def _construct_int(loader: yaml.SafeLoader, node: ScalarNode) -> int:
    text = loader.construct_scalar(node)
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-")
    if digits.startswith("0o"):
        return sign * int(digits[2:], 8)
    if digits.startswith("0x"):
        return sign * int(digits[2:], 16)
    return sign * int(digits, 10)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2 core typing and the limits above."""

    yaml_implicit_resolvers: dict = {}

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._aliases = False

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases = True
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Problem(self.peek_event().start_mark, f"nesting is deeper than {MAX_DEPTH} levels",
                               "flatten the structure; no EvoTrainer file nests that deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self):
        node = super().get_single_node()
        if node is not None and self._aliases:
            _check_expansion(node)
        return node

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            first: dict = {}
            for key_node, _value in node.value:
                if key_node.tag == MERGE_TAG or not isinstance(key_node, ScalarNode):
                    continue  # merged keys may be overridden; unhashable keys fail in PyYAML's own check
                key = self.construct_object(key_node)
                if key in first:
                    raise _Problem(key_node.start_mark,
                                   f"duplicate key {key!r} (first at line {first[key].line + 1})",
                                   "keep one of them; YAML keys must be unique")
                first[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


_KIND_WORDS = {"int": "an integer", "bool": "true or false", "float": "a number"}


def _scalar_checked(kind: str, construct):
    """An explicitly tagged scalar that is not what its tag says (`!!int abc`) is a one-line error."""
    def checked(loader, node):
        try:
            return construct(loader, node)
        except (ValueError, KeyError, IndexError):
            raise _Problem(node.start_mark, f"{node.value!r} is not a valid !!{kind}",
                           f"write {_KIND_WORDS[kind]} or drop the explicit tag") from None
    return checked


# JSON types only: explicit !!binary, !!set, !!omap, !!pairs, !!timestamp would yield
# values no schema check or `json.dumps` downstream expects.
_Loader.yaml_constructors = {tag: fn for tag, fn in _Loader.yaml_constructors.items()
                             if tag is None or tag.rsplit(":", 1)[-1] in ("null", "bool", "float", "str", "seq", "map")}
_Loader.add_constructor("tag:yaml.org,2002:int", _scalar_checked("int", _construct_int))
for _kind in ("bool", "float"):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_kind}", _scalar_checked(_kind, _Loader.yaml_constructors[f"tag:yaml.org,2002:{_kind}"]))
for _tag, _pattern, _first in _CORE_RESOLVERS:
    _Loader.add_implicit_resolver(_tag, re.compile(_pattern), _first)


def _check_expansion(root) -> None:
    """Refuse a document whose aliases refer to themselves or expand past MAX_EXPANDED_NODES.

    Counts the nodes of the fully expanded tree with one memoised, iterative walk
    over the node graph, so a billion-laughs document is measured in microseconds.
    """
    size: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            active.discard(key)
            kids = _children(node)
            total = 1 + sum(size[id(k)] for k in kids)
            if total > MAX_EXPANDED_NODES:
                raise _Problem(node.start_mark, f"aliases expand to more than {MAX_EXPANDED_NODES:,} values",
                               "write the values out, or alias smaller pieces")
            size[key] = total
            continue
        if key in size:
            continue
        if key in active:
            raise _Problem(node.start_mark, "an alias refers to the node that contains it (a recursive alias)",
                           "alias a node defined outside it, or write the value out")
        active.add(key)
        stack.append((node, True))
        for kid in _children(node):
            if id(kid) in active:
                raise _Problem(kid.start_mark, "an alias refers to the node that contains it (a recursive alias)",
                               "alias a node defined outside it, or write the value out")
            if id(kid) not in size:
                stack.append((kid, False))


def _children(node) -> list:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def display_path(path: str | Path) -> str:
    """How a file is named in messages: relative to the current folder when inside it, else as given."""
    path = Path(path)
    if path.is_absolute():
        try:
            return str(path.relative_to(Path(os.getcwd())))
        except (ValueError, OSError):
            pass
    return str(path)


def read_text(path: str | Path, *, source: str | None = None, kind: str = "YAML") -> str:
    """A config file's text; ConfigError for a missing, oversized, binary or non-UTF-8 file."""
    path = Path(path)
    source = source or display_path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ConfigError(f"{source}: {size:,} bytes is too large for a {kind} config file "
                              f"(limit {MAX_BYTES // (1024 * 1024)} MiB); give the right file")
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{source}: file not found; check the path") from None
    except IsADirectoryError:
        raise ConfigError(f"{source}: is a folder, not a file; give the YAML file inside it") from None
    except PermissionError:
        raise ConfigError(f"{source}: permission denied; make it readable") from None
    return decode_text(data, source=source, kind=kind)


def decode_text(data: bytes, *, source: str, kind: str = "YAML") -> str:
    """UTF-8 text of `data` (a `kind` file, e.g. YAML or JSON), or a ConfigError naming the first bad byte."""
    if b"\0" in data:
        offset = data.index(b"\0")
        raise ConfigError(f"{source}: binary file (a NUL byte at offset {offset}), not {kind} text; "
                          f"give the {kind} file, saved as UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{source}: line {line}: byte 0x{data[exc.start]:02x} is not UTF-8 text; "
                          "save the file as UTF-8") from None
    return text.removeprefix("\ufeff")


def load_yaml(path: str | Path, *, expect_mapping: bool = True, source: str | None = None) -> Any:
    """Parse the YAML file `path`; raise ConfigError naming the file, line and fix on failure."""
    source = source or display_path(path)
    return parse_yaml(read_text(path, source=source), source=source, expect_mapping=expect_mapping)


def parse_yaml(text: str, *, source: str, expect_mapping: bool = True) -> Any:
    """Parse YAML `text` (from `source`, named in errors) under the rules in the module docstring."""
    if len(text) > MAX_BYTES:
        raise ConfigError(f"{source}: {len(text):,} characters is too large for a YAML config file; give the right file")
    loader = None
    try:
        loader = _Loader(text)
        data = loader.get_single_data()
    except _Problem as exc:
        raise ConfigError(f"{source}:{_where(exc.mark)}: {exc.problem}; {exc.fix}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(_describe(exc, source, text)) from None
    except RecursionError:  # not reachable within MAX_DEPTH; kept so no input can produce a traceback
        raise ConfigError(f"{source}: nesting is too deep to read; flatten the structure") from None
    finally:
        if loader is not None:
            loader.dispose()
    if expect_mapping and not isinstance(data, dict):
        kind = type(data).__name__ if data is not None else "an empty document"
        raise ConfigError(f"{source}: expected a mapping of keys at the top level, found {kind}; "
                          "write `key: value` lines")
    return data


def _where(mark) -> str:
    return f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _describe(exc: yaml.YAMLError, source: str, text: str) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        line = text[: exc.position].count("\n") + 1
        return (f"{source}: line {line}: control character U+{exc.character:04X} is not allowed in YAML; "
                "remove it (or write it as an escape in a double-quoted string)")
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    if context and not context.startswith("while"):  # e.g. "expected a single document in the stream"
        problem = context.removesuffix("; first occurrence")
    return f"{source}:{_where(mark)}: malformed YAML ({' '.join(str(problem).split())}); fix the syntax there"


class _Dumper(yaml.SafeDumper):
    """SafeDumper that also quotes strings YAML 1.2 would read as non-strings (e.g. '5e-4')."""


for _tag, _pattern, _first in _CORE_RESOLVERS:
    _Dumper.add_implicit_resolver(_tag, re.compile(_pattern), _first)


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False)
