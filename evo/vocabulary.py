"""The lineage's vocabulary, in one place: outcome classes, version states, decisions, event ids, headlines.

Every module that writes or shows a verdict uses these names and this one
formatter, so a new outcome or a changed interval format is one edit. Enums are
`str` subclasses (as verl's `AdvantageEstimator`): they compare equal to the
plain strings stored in lineage notes, so old notes read as they always did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import Enum


class Outcome(str, Enum):
    """The four outcome classes of a judged version (evo/harness/outcome.py decides which)."""

    IMPROVEMENT = "improvement"
    REGRESSION = "regression"
    MIXED = "mixed"
    INSUFFICIENT = "insufficient"


class State(str, Enum):
    """A version's state, derived from refs and events (evo/lineage/events.py)."""

    PROMOTED = "promoted"
    FRONTIER = "frontier"
    PRUNED = "pruned"
    REVERTED = "reverted"
    AWAITING = "awaiting-approval"


class Action(str, Enum):
    """What the loop decides for a judged version (evo/loop/decide.py); `recorded` is its event's name."""

    PROMOTE = "promote"
    PRUNE = "prune"
    KEEP = "keep"

    @property
    def recorded(self) -> str:
        return {"promote": "promoted", "prune": "pruned", "keep": "kept"}[self.value]


OUTCOMES = tuple(o.value for o in Outcome)
STATES = tuple(s.value for s in State)


def event_id(version: str, kind: str, *qualifiers: object) -> str:
    """The one id rule for lineage events: `v3:judged`, `v3:gated:approved`, `v3:promoted:<merge sha>`.

    Deterministic, so a resumed phase appends nothing twice (appending an id
    that is already there is a no-op). Ids written before this rule (`v3-promoted-<sha>`,
    a random suffix for events given without one) are still read as they are.
    """
    return ":".join([version, kind, *(str(q) for q in qualifiers if q not in (None, ""))])


def _signed(x: float | None, digits: int) -> str:
    return "?" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.{digits}f}"


@dataclass(frozen=True)
class Headline:
    """One comparison's headline figure: the candidate's value, its delta against a baseline and the interval.

    A missing interval bound prints as `?`, never as a number.
    """

    metric: str = "score/avg_at_k"
    value: float | None = None
    baseline_value: float | None = None
    delta: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    noise_floor: float | None = None

    @classmethod
    def from_dict(cls, data: dict | None) -> "Headline":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known and v is not None})

    @property
    def interval(self) -> str:
        return f"[{_signed(self.ci_low, 3)}, {_signed(self.ci_high, 3)}]"

    def compact(self, *, with_metric: bool = True) -> str:
        """`score/avg_at_k 0.412 Δ+0.031 [+0.004, +0.058]` (evo log, evo show, evo status)."""
        if self.value is None:
            return ""
        text = (f"{self.metric} " if with_metric else "") + f"{self.value:.3f}"
        if self.delta is not None:
            text += f" Δ{self.delta:+.3f}"
        if self.ci_low is not None and self.ci_high is not None:
            text += f" {self.interval}"
        return text

    def delta_text(self) -> str:
        """`Δ +0.19 [+0.12, +0.26]` (memory digests, search notes); "" without a delta."""
        if self.delta is None:
            return ""
        text = f"Δ {self.delta:+.4g}"
        if self.ci_low is not None and self.ci_high is not None:
            text += f" [{self.ci_low:+.4g}, {self.ci_high:+.4g}]"
        return text

    def full(self) -> str:
        """`score/avg_at_k 0.4333 (delta +0.1333, 95% CI [+0.1028, +0.1639], p=1.1e-08, noise floor ±0.02)`."""
        if self.value is None:
            return "-"
        return f"{self.metric} {self.value:.4f}" + self._evidence(" (delta {}", "p={}", "noise floor")

    def markdown(self) -> str:
        """`**score/avg_at_k = 0.4333**, delta +0.1333 (95% CI [...], Wilcoxon p = ...)` (pull-request bodies)."""
        if self.value is None:
            return "not judged yet"
        return f"**{self.metric} = {self.value:.4f}**" + self._evidence(", delta {} (", "Wilcoxon p = {}", "seed noise floor")

    def _evidence(self, lead: str, p_format: str, floor_label: str) -> str:
        """The delta, its interval, p and the noise floor, worded by `full` and `markdown`; "" without a delta."""
        if self.delta is None:
            return ""
        text = lead.format(f"{self.delta:+.4f}") + ("" if lead.endswith("(") else ", ")
        text += f"95% CI [{_signed(self.ci_low, 4)}, {_signed(self.ci_high, 4)}]"
        if self.p_value is not None:
            text += ", " + p_format.format(f"{self.p_value:.3g}")
        if self.noise_floor:
            text += f", {floor_label} ±{self.noise_floor:.4f}"
        return text + ")"

    def phrase(self, label: str, against: str | None = None) -> str:
        """`improvement: score/avg_at_k delta vs control +0.081 (95% CI [+0.053, +0.108])` (decision reasons)."""
        if self.delta is None:
            return label
        versus = f" vs {against}" if against else ""
        return f"{label}: {self.metric} delta{versus} {self.delta:+.3f} (95% CI {self.interval})"
