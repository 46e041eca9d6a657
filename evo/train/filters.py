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
- **Dynamic sampling** (`filters.std_group.refill`, DAPO): the StdGroupFilter's
  decisions stay as they are, but the trainer samples further prompt batches
  until the step holds `prompts_per_step` live groups (or
  `max_generation_batches` were sampled); live groups beyond the batch are
  dropped with the reason `refill: ...` (`refill_reason`).
- **SNR-aware filtering** (`filters.snr`, RAGEN): rank the step's groups by the
  spread of a component, highest first, and keep them until they hold `top_p`
  of the total spread (`snr_decisions`); groups without spread stay candidates
  only with `include_zero`. `loss_scaling` multiplies advantages by the kept
  ratio (`linear`) or its square root (`sqrt`). It ranks across the whole step,
  so the trainer gives it every rank's spreads.
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
SNR_LOSS_SCALINGS = ("none", "linear", "sqrt")


@dataclass(frozen=True)
class FilterConfig:
    std_group: bool
    std_epsilon: float
    std_component: str
    anomaly: bool
    anomaly_rules: tuple[str, ...]
    ngram: int
    max_ngram_repeats: int
    truncation_mask: bool
    refill: bool
    max_generation_batches: int
    snr: bool
    snr_top_p: float
    snr_include_zero: bool
    snr_loss_scaling: str
    snr_component: str

    @property
    def generation_batches(self) -> int:
        """The most prompt batches one step samples: `max_generation_batches` with refill, else 1."""
        return self.max_generation_batches if self.refill else 1

    @classmethod
    def from_recipe(cls, filters: Mapping | None) -> "FilterConfig":
        """Build from a recipe's `filters` mapping; missing keys take the recipe schema's defaults."""
        from evo.recipe import with_defaults

        filters = with_defaults({"filters": dict(filters or {})})["filters"]
        std, anom, snr = filters["std_group"], filters["anomaly"], filters["snr"]
        if std["refill"] and not std["enabled"]:
            raise ConfigError("recipe.yaml: filters.std_group.refill: true needs the StdGroupFilter; "
                              "set filters.std_group.enabled: true (refill samples until the step has live groups)")
        rules = tuple(anom["rules"])
        for i, rule in enumerate(rules):
            if rule not in ANOMALY_RULES:
                raise ConfigError(f"recipe.yaml: filters.anomaly.rules[{i}]: {rule!r} is not a rule; "
                                  f"use one of {', '.join(ANOMALY_RULES)}")
        return cls(
            std_group=bool(std["enabled"]),
            std_epsilon=float(std["epsilon"]),
            std_component=str(std["component"]),
            anomaly=bool(anom["enabled"]),
            anomaly_rules=rules,
            ngram=int(anom["ngram"]),
            max_ngram_repeats=int(anom["max_ngram_repeats"]),
            truncation_mask=bool(filters["truncation_mask"]),
            refill=bool(std["refill"]),
            max_generation_batches=int(std["max_generation_batches"]),
            snr=bool(snr["enabled"]),
            snr_top_p=float(snr["top_p"]),
            snr_include_zero=bool(snr["include_zero"]),
            snr_loss_scaling=str(snr["loss_scaling"]),
            snr_component=str(snr["component"]),
        )

    def check_std_component(self, components: Sequence[str]) -> None:
        """Raise ConfigError when a filter looks at a component outside `components` (and "total")."""
        for on, key, name in ((self.std_group, "std_group", self.std_component), (self.snr, "snr", self.snr_component)):
            if on and name not in ("total", *components):
                raise ConfigError(f"recipe.yaml: filters.{key}.component: {name!r} is not a reward "
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


def refill_reason(live_groups: int) -> str:
    """Why a live group of a later generation batch does not train: the step already has its groups."""
    return f"refill: surplus, the step already holds {live_groups} live groups"


def snr_inputs(values_by_group: Sequence[Sequence[float]],
               decisions_by_group: Sequence[Sequence[Decision]]) -> tuple[list[float], list[bool]]:
    """Per group: the spread of `values` over its still-kept trajectories, and whether any is kept (a candidate)."""
    spreads, candidates = [], []
    for values, decisions in zip(values_by_group, decisions_by_group):
        kept = [float(v) for v, d in zip(values, decisions) if d.kept]
        spreads.append(spread(kept))
        candidates.append(bool(kept))
    return spreads, candidates


def snr_decisions(spreads: Sequence[float], candidates: Sequence[bool], cfg: FilterConfig) -> list[str]:
    """The SNR filter over one step's groups: "" for a kept group, else its drop reason. Shapes follow `spreads`.

    `spreads[g]` is the group's spread (population std) of `cfg.snr_component`
    over its surviving trajectories; `candidates[g]` is False for groups an
    earlier filter already dropped (they get "" here and keep their reason).
    Candidates without spread (below `cfg.std_epsilon`) are dropped unless
    `include_zero`; the others are ranked by spread, highest first (ties by
    position), and kept while the kept spread is below `top_p` of the total.
    Groups without spread are never needed to reach a share, so they stay only
    when `top_p` is 1 and `include_zero` is set.
    """
    eps = cfg.std_epsilon
    reasons = ["" for _ in spreads]
    pool = [g for g, c in enumerate(candidates) if c]
    if not cfg.snr_include_zero:
        for g in pool:
            if spreads[g] < eps:
                reasons[g] = "snr: zero spread (include_zero: false)"
        pool = [g for g in pool if spreads[g] >= eps]
    if cfg.snr_top_p >= 1.0:
        return reasons
    ranked = sorted((g for g in pool if spreads[g] >= eps), key=lambda g: (-spreads[g], g))
    total = sum(spreads[g] for g in ranked)
    kept, held = set(), 0.0
    for g in ranked:
        if held >= cfg.snr_top_p * total:
            break
        kept.add(g)
        held += spreads[g]
    cut = min((spreads[g] for g in kept), default=0.0)
    for rank, g in enumerate(sorted(pool, key=lambda g: (-spreads[g], g)), start=1):
        if g not in kept:
            reasons[g] = (f"snr: spread {spreads[g]:.3g} below the top_p {cfg.snr_top_p:g} cut "
                          f"(rank {rank} of {len(pool)}, kept down to {cut:.3g})")
    return reasons


def snr_loss_scale(kept_groups: int, groups: int, mode: str) -> float:
    """The factor on advantages for a kept ratio kept_groups / groups: none 1, linear ratio, sqrt its root."""
    if mode not in SNR_LOSS_SCALINGS:
        raise ConfigError(f"recipe.yaml: filters.snr.loss_scaling: {mode!r} is not one of {', '.join(SNR_LOSS_SCALINGS)}")
    ratio = kept_groups / groups if groups else 0.0
    return {"none": 1.0, "linear": ratio, "sqrt": math.sqrt(ratio)}[mode]
