"""A recipe, typed: frozen sections built from the validated, default-filled mapping.

Each entry point that reads a recipe types it once (a training run in its
Trainer, an evaluation, a cost estimate), then passes sections down.

The recipe stays a mapping where it is text to edit, diff, hash and patch by
dotted path (the agents, the lineage, the guard): that is what `recipe.yaml`
is. Code that *reads* a recipe to train, sample, evaluate or cost it takes a
`RecipeSpec` instead, so a field is named once, typed once, and defaulted in
one place: the schema (`evo/schemas/recipe.schema.json`), which
`normalize_recipe` applies. A required key missing here is a bug (a mapping
that skipped normalisation), not a cue to guess a default; `tests/test_recipe_spec.py`
checks every section's fields against the schema's properties.

Free-form parts stay mappings owned by one reader each: `domain.options` (the
environment validates them), `rollout.vllm` and `grpo.deepspeed` (passed to
those engines), `reward` (the reward terms and the model judge) and `filters`
(`evo.train.filters.FilterConfig`).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Mapping

from evo.recipe import with_defaults


class _Section:
    """A frozen section built from its default-filled mapping: every field without a default is required."""

    @classmethod
    def of(cls, data: Mapping):
        values = {}
        for f in fields(cls):
            if f.name in data:
                value = data[f.name]
                values[f.name] = tuple(value) if isinstance(value, list) else value
            elif f.default is MISSING and f.default_factory is MISSING:
                raise KeyError(f"{cls.__name__.lower()}.{f.name} is missing: build a RecipeSpec from a normalised recipe")
        return cls(**values)


@dataclass(frozen=True)
class Domain(_Section):
    name: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Model(_Section):
    name: str
    dtype: str
    chat_template: bool


@dataclass(frozen=True)
class Rollout(_Section):
    backend: str
    prompts_per_step: int
    num_generations: int
    max_new_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    max_total_tokens: int | None = None  # None: no budget per episode beyond max_new_tokens per turn
    vllm: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Grpo(_Section):
    steps: int
    num_iterations: int
    learning_rate: float
    lr_schedule: str
    warmup_steps: int
    weight_decay: float
    eps_low: float
    eps_high: float
    kl_coef: float
    max_grad_norm: float
    scale_advantage_by_std: bool
    advantage_std: str
    loss_aggregation: str
    micro_batch_size: int
    engine: str
    fsdp: bool
    balance_ranks: bool
    checkpoint_every: int
    deepspeed: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Eval(_Section):
    k: int
    seed: int
    temperature: float
    split: str
    max_tasks: int | None = None


SECTIONS = {"domain": Domain, "model": Model, "rollout": Rollout, "grpo": Grpo, "eval": Eval}


@dataclass(frozen=True)
class RecipeSpec:
    name: str | None
    seed: int
    domain: Domain
    model: Model
    rollout: Rollout
    grpo: Grpo
    eval: Eval
    reward: Mapping[str, Any]
    filters: Mapping[str, Any]

    @classmethod
    def of(cls, recipe: Mapping) -> "RecipeSpec":
        """The typed view of a normalised recipe (`load_recipe` / `normalize_recipe`)."""
        data = with_defaults(dict(recipe))
        return cls(name=data.get("name"), seed=data["seed"],
                   **{key: kind.of(data[key]) for key, kind in SECTIONS.items()},
                   reward=data.get("reward") or {}, filters=data.get("filters") or {})


def section(kind: type, recipe: Mapping, key: str):
    """One section of a possibly partial recipe (a test's, a backtest's), its schema defaults filled."""
    return kind.of(with_defaults({key: dict(recipe.get(key) or {})})[key])
