"""Lineage events: validation against `lineage_event.schema.json`, and records.

Every note line is validated on write and on read. Reading 1,000 versions means
validating thousands of events, and the general jsonschema validator costs
~0.5 ms per event on this schema, so reads use a per-event-type schema (the
common fields merged with that type's fields) compiled by fastjsonschema,
~15 µs per event. The schema file stays the single source of truth; when the
fast check fails, jsonschema re-checks the event against the whole schema to
produce the usual one-line message (path, bad value, fix).
"""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import fastjsonschema

from evo.errors import LineageError
from evo.vocabulary import STATES as VOCABULARY_STATES
from evo.vocabulary import State, event_id

SCHEMA = "lineage_event"
# Read directly rather than through evo.schemas, whose import pulls in jsonschema
# (~0.1 s); that is only needed to word an error.
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / f"{SCHEMA}.schema.json"


@lru_cache(maxsize=None)
def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def event_types() -> tuple[str, ...]:
    """The event types the schema knows, in schema order."""
    return tuple(load_schema()["properties"]["event"]["enum"])


def _inline(node: Any, defs: dict) -> Any:
    """Replace local `{"$ref": "#/$defs/x"}` nodes by their definitions."""
    if isinstance(node, dict):
        if set(node) == {"$ref"} and node["$ref"].startswith("#/$defs/"):
            return _inline(defs[node["$ref"].rsplit("/", 1)[1]], defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(x, defs) for x in node]
    return node


@lru_cache(maxsize=None)
def _type_schemas() -> dict[str, dict]:
    """event type -> the common schema merged with that type's `then` branch."""
    schema = load_schema()
    defs = schema.get("$defs", {})
    common = _inline({k: v for k, v in schema.items() if k not in ("allOf", "$defs", "$schema")}, defs)
    specific: dict[str, dict] = {}
    for rule in schema.get("allOf", []):
        cond = rule["if"]["properties"]["event"]
        names = [cond["const"]] if "const" in cond else list(cond["enum"])
        for name in names:
            specific[name] = _inline(rule["then"], defs)
    out = {}
    for name in event_types():
        sub = specific.get(name, {})
        merged = copy.deepcopy(common)
        clash = set(merged["properties"]) & set(sub.get("properties", {}))
        if clash:  # a schema edit that would make the merge ambiguous; fail loudly in tests
            raise LineageError(f"{SCHEMA}.schema.json: event {name!r} redefines common fields {sorted(clash)}")
        merged["properties"].update(sub.get("properties", {}))
        merged["required"] = list(merged["required"]) + [r for r in sub.get("required", []) if r not in merged["required"]]
        out[name] = merged
    return out


@lru_cache(maxsize=None)
def _fast_validator(event_type: str) -> Callable[[Any], Any]:
    return fastjsonschema.compile(_type_schemas()[event_type])


def check_event(event: Any, *, source: str, fix: str = "") -> dict:
    """Validate one event; raise LineageError with one line naming `source` on failure."""
    if isinstance(event, dict) and event.get("event") in _type_schemas():
        try:
            _fast_validator(event["event"])(event)
            return event
        except fastjsonschema.JsonSchemaException as exc:
            fast_message = str(exc)
    else:
        fast_message = "not a lineage event"
    from evo.schemas import validate

    suffix = f"; {fix}" if fix else ""
    try:
        validate(event, SCHEMA, source=source, error_cls=LineageError)
    except LineageError as exc:
        raise LineageError(f"{exc}{suffix}") from None
    raise LineageError(f"{source}: {fast_message}{suffix}")


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def complete_event(version: str, event: dict) -> dict:
    """Copy of `event` with `version`, `time` and `id` filled where missing."""
    out = dict(event)
    out.setdefault("version", version)
    if out["version"] != version:
        raise LineageError(f"event {out.get('event')!r} says version {out['version']!r} but is appended to {version}; drop the field or fix it")
    out.setdefault("time", now_iso())
    out.setdefault("id", event_id(version, out.get("event", "event"), uuid.uuid4().hex[:12]))
    return out


STATES = VOCABULARY_STATES


@dataclass
class VersionRecord:
    """Everything lineage knows about one version, from refs and note events."""

    name: str
    commit: str | None
    branch: str | None  # the ref holding the version: refs/heads/evo/vN or refs/evo/pruned/vN
    state: str
    parents: list[str] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    promoted_tag: bool = False

    @property
    def number(self) -> int:
        return version_number(self.name)

    def last(self, event_type: str) -> dict | None:
        for ev in reversed(self.events):
            if ev["event"] == event_type:
                return ev
        return None

    @property
    def created(self) -> str | None:
        ev = self.last("created")
        return ev["time"] if ev else None

    @property
    def intervention(self) -> str | dict | None:
        ev = self.last("created")
        return ev.get("intervention") if ev else None

    @property
    def intervention_summary(self) -> str:
        """A short human label: the manifest's factor, or the summary string."""
        iv = self.intervention
        if iv is None:
            return "baseline" if self.last("created") is not None and not self.parents else ""
        if isinstance(iv, dict):
            return str(iv.get("factor") or iv.get("summary") or iv.get("hypothesis") or "")
        return str(iv)

    @property
    def outcome(self) -> str | None:
        ev = self.last("judged")
        return ev["outcome"] if ev else None

    @property
    def headline(self) -> dict | None:
        ev = self.last("judged")
        return ev["headline"] if ev else None

    @property
    def avg_at_k(self) -> float | None:
        ev = self.last("evaluated")
        return ev["avg_at_k"] if ev else None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "parents": self.parents,
            "commit": self.commit,
            "branch": self.branch,
            "state": self.state,
            "intervention": self.intervention,
            "outcome": self.outcome,
            "headline": self.headline,
            "avg_at_k": self.avg_at_k,
            "created": self.created,
            "events": self.events,
        }


def version_number(name: str) -> int:
    """3 for 'v3'; names come from refs that `gitio.is_version_name` already checked."""
    return int(name[1:])


def derive_state(events: list[dict], *, pruned: bool, promoted_tag: bool) -> str:
    """State from refs + events, as docs/contracts.md defines it."""
    if pruned:
        return State.PRUNED.value
    last_promoted = last_reverted = last_gate = last_decision = -1
    gate_waiting = False
    for i, ev in enumerate(events):
        kind = ev["event"]
        if kind == "promoted":
            last_promoted = i
        elif kind == "reverted":
            last_reverted = i
        elif kind == "gated":
            last_gate, gate_waiting = i, ev["status"] == "awaiting-approval"
        elif kind in ("approved", "rejected"):
            last_decision = i
    if last_reverted > last_promoted:
        return State.REVERTED.value
    if promoted_tag:
        return State.PROMOTED.value
    if gate_waiting and last_decision < last_gate:
        return State.AWAITING.value
    return State.FRONTIER.value


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def event_sort_key(event: dict) -> datetime:
    """Parsed event time; mixed ISO forms ('...00Z' and '...00.5Z') sort correctly."""
    text = event["time"].replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:  # older Pythons want exactly 6 fraction digits
        digits = "".join(ch for ch in rest if ch.isdigit())
        text = f"{head}.{(digits + '000000')[:6]}{rest[len(digits):]}"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return EPOCH
