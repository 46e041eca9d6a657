"""Rollout filters: which trajectories train, and why the others do not.

- **Trajectory anomaly exclusion** (`filters.anomaly`): drop a trajectory that
  matches a rule — `truncated` (hit a token limit), `empty` (no policy tokens or
  blank text), `repeated_ngram` (some token n-gram of length `ngram` occurs more
  than `max_ngram_repeats` times: the Echo Trap), `max_turns` (the episode ran out
  of turns). Dropped trajectories leave the group statistics too.
- **StdGroupFilter** (`filters.std_group`): drop a whole group whose within-group
  spread (population std) of a reward component — or of the total reward — is
  below `epsilon`. An epsilon, not an exact-zero test: float rewards that differ
  by 1e-12 carry no learning signal either.
- **Dual-Level Filter**: both enabled; anomalies go first, the std test then
  sees only the survivors.
- **Truncation masking** (`filters.truncation_mask`): a truncated trajectory is
  kept in its group's statistics (its reward shapes the others' advantages) but
  its tokens are excluded from the loss.

Every decision carries a reason string (`"anomaly: truncated"`,
`"std_group: spread 0 < 1e-06"`), stored per trajectory in rollouts.parquet.
Pure functions over plain lists, so the harness's backtests replay stored
rollouts through exactly this code.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from evo.errors import ConfigError

ANOMALY_RULES = ("truncated", "empty", "repeated_ngram", "max_turns")


@dataclass(frozen=True)
class FilterConfig:
    std_group: bool = False
    std_epsilon: float = 1e-6
    std_component: str = "total"
    anomaly: bool = False
    anomaly_rules: tuple[str, ...] = ("truncated", "empty", "repeated_ngram")
    ngram: int = 4
    max_ngram_repeats: int = 4
    truncation_mask: bool = False

    @classmethod
    def from_recipe(cls, filters: Mapping | None) -> "FilterConfig":
        """Build from a normalised recipe's `filters` mapping (missing keys take defaults)."""
        filters = filters or {}
        std = filters.get("std_group") or {}
        anom = filters.get("anomaly") or {}
        rules = tuple(anom.get("rules", cls.anomaly_rules))
        for i, rule in enumerate(rules):
            if rule not in ANOMALY_RULES:
                raise ConfigError(f"recipe.yaml: filters.anomaly.rules[{i}]: {rule!r} is not a rule; "
                                  f"use one of {', '.join(ANOMALY_RULES)}")
        return cls(
            std_group=bool(std.get("enabled", False)),
            std_epsilon=float(std.get("epsilon", 1e-6)),
            std_component=str(std.get("component", "total")),
            anomaly=bool(anom.get("enabled", False)),
            anomaly_rules=rules,
            ngram=int(anom.get("ngram", 4)),
            max_ngram_repeats=int(anom.get("max_ngram_repeats", 4)),
            truncation_mask=bool(filters.get("truncation_mask", False)),
        )

    def check_std_component(self, components: Sequence[str]) -> None:
        """Raise ConfigError when the StdGroupFilter looks at a component outside `components` (and "total")."""
        if self.std_group and self.std_component not in ("total", *components):
            raise ConfigError(f"recipe.yaml: filters.std_group.component: {self.std_component!r} is not a reward "
                              f"component of this domain; use one of {', '.join(['total', *components])}")


@dataclass
class TrajectoryFlags:
    """What the anomaly rules look at. `tokens` are the policy-produced token ids."""

    truncated: bool = False
    num_tokens: int = 0
    tokens: Sequence[int] = ()
    finish_reason: str = ""
    text: str | None = None


@dataclass
class Decision:
    kept: bool = True
    reason: str = ""  # "" when kept
    masked: bool = False  # kept for group statistics, excluded from the loss
    in_group_stats: bool = True  # counts in the group's mean/std for advantages

    @property
    def contributes(self) -> bool:
        return self.kept and not self.masked


def max_ngram_repeats(tokens: Sequence[int], n: int) -> int:
    """How often the most frequent n-gram of `tokens` occurs (0 if shorter than n)."""
    if len(tokens) < n:
        return 0
    grams = Counter(tuple(tokens[i: i + n]) for i in range(len(tokens) - n + 1))
    return max(grams.values())


def anomaly_reason(flags: TrajectoryFlags | Mapping, cfg: FilterConfig) -> str:
    """The first anomaly rule (in `cfg.anomaly_rules` order) the trajectory matches, or ""."""
    f = flags if isinstance(flags, TrajectoryFlags) else TrajectoryFlags(**dict(flags))
    for rule in cfg.anomaly_rules:
        if rule == "truncated" and f.truncated:
            return "anomaly: truncated"
        if rule == "empty" and (f.num_tokens == 0 or (f.text is not None and not f.text.strip())):
            return "anomaly: empty"
        if rule == "repeated_ngram":
            repeats = max_ngram_repeats(list(f.tokens), cfg.ngram)
            if repeats > cfg.max_ngram_repeats:
                return f"anomaly: repeated_ngram ({cfg.ngram}-gram x{repeats} > {cfg.max_ngram_repeats})"
        if rule == "max_turns" and f.finish_reason == "max_turns":
            return "anomaly: max_turns"
    return ""


def spread(values: Sequence[float]) -> float:
    """Population standard deviation (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


@dataclass
class StdGroupFilter:
    """Drop groups whose within-group spread of `component` is below `epsilon`."""

    epsilon: float = 1e-6
    component: str = "total"

    def reason(self, values: Sequence[float]) -> str:
        """"" if the group keeps its signal, else the drop reason."""
        s = spread(values)
        return "" if s >= self.epsilon else f"std_group: spread {s:.3g} < {self.epsilon:g}"


def apply_filters(
    rewards_by_group: Sequence[Sequence[float]],
    component_values: Mapping[str, Sequence[Sequence[float]]] | None,
    flags: Sequence[Sequence[TrajectoryFlags | Mapping]],
    cfg: FilterConfig,
) -> list[list[Decision]]:
    """Decide, per group and trajectory, what trains. Shapes follow `rewards_by_group`.

    `component_values[name][g][i]` holds reward component `name`; it is needed only
    when the StdGroupFilter looks at a component other than "total".
    """
    decisions: list[list[Decision]] = []
    std_filter = StdGroupFilter(cfg.std_epsilon, cfg.std_component)
    cfg.check_std_component(sorted(component_values or {}))
    for g, rewards in enumerate(rewards_by_group):
        group = [Decision() for _ in rewards]
        if cfg.anomaly:
            for i, d in enumerate(group):
                why = anomaly_reason(flags[g][i], cfg)
                if why:
                    d.kept, d.reason, d.in_group_stats = False, why, False
        if cfg.std_group:
            source = rewards if cfg.std_component == "total" else component_values[cfg.std_component][g]
            survivors = [i for i, d in enumerate(group) if d.kept]
            why = std_filter.reason([float(source[i]) for i in survivors])
            if why:
                for i in survivors:
                    group[i].kept, group[i].reason, group[i].in_group_stats = False, why, False
        if cfg.truncation_mask:
            for i, d in enumerate(group):
                f = flags[g][i]
                truncated = f.truncated if isinstance(f, TrajectoryFlags) else bool(f.get("truncated"))
                if d.kept and truncated:
                    d.masked = True
        decisions.append(group)
    return decisions
