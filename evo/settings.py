"""Workspace settings: `evo.yaml`, validated by `evo/schemas/settings.schema.json`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Mapping, get_type_hints

from evo.errors import ConfigError
from evo.recipe import fill_defaults
from evo.schemas import load_schema, validate
from evo.yamlio import display_path, load_yaml

SETTINGS_FILE = "evo.yaml"


def normalize_settings(data: dict, *, source: str = SETTINGS_FILE) -> dict:
    validate(data, "settings", source=source)
    settings = fill_defaults(data, load_schema("settings"))
    root = settings["artifacts"]["root"]
    if "://" in root:
        raise ConfigError(f"{source}: artifacts.root: {root!r} is a URL; remote artifact storage is not supported yet, "
                          "use a local path (a shared mount works)")
    return settings


@dataclass(frozen=True)
class Search:
    frontier_size: int
    bootstrap_samples: int
    headline: str
    control: str  # continue | none
    train_seeds: int
    calibration_seeds: int
    explore: int  # untriggered levers tried from one parent at a measured plateau


@dataclass(frozen=True)
class Gate:
    approval_above_gpu_hours: float
    gpu_hours_per_million_tokens: float


@dataclass(frozen=True)
class Budget:
    max_steps: int | None
    max_gpu_hours: float | None
    max_agent_tokens: int | None
    max_agent_cost_usd: float | None


@dataclass(frozen=True)
class Launch:
    nproc: int
    launcher: str  # torchrun | deepspeed


@dataclass(frozen=True)
class LoopSettings:
    """The settings the loop decides with (evo.yaml's search, gate, budget and run), typed and frozen.

    Built once per step from the validated, default-filled mapping: the schema
    is the one place a default is written, so a key missing here is a bug (a
    mapping that skipped `normalize_settings`), not a cue to guess. The
    free-form sections (agent, paths, audits, logging, harness) stay mappings,
    each read by the one module that owns it.
    """

    search: Search
    gate: Gate
    budget: Budget
    run: Launch

    @classmethod
    def of(cls, settings: Mapping) -> "LoopSettings":
        hints = get_type_hints(cls)
        return cls(**{f.name: _section(hints[f.name], settings[f.name]) for f in fields(cls)})


def _section(kind: type, data: Mapping):
    return kind(**{f.name: data[f.name] for f in fields(kind)})


def load_settings(root: str | Path) -> dict:
    """Read and validate `<root>/evo.yaml`, filling defaults; errors name the file read."""
    path = Path(root) / SETTINGS_FILE
    source = display_path(path)
    return normalize_settings(load_yaml(path, source=source), source=source)


def artifact_root(root: str | Path, settings: dict) -> Path:
    """The folder holding every version's run artifacts (default `.evo/artifacts`)."""
    base = Path(settings["artifacts"]["root"])
    return base if base.is_absolute() else Path(root) / base


PLOTS_DIR = "plots"  # a version's PNG plots (evo plot) inside its artifact folder; `evo pr vN` lists them


def plots_dir(root: str | Path, settings: dict, version: str) -> Path:
    """Where `evo plot vN` writes vN's PNGs (and `evo pr vN` finds them)."""
    return artifact_dir(root, settings, version) / PLOTS_DIR


def artifact_dir(root: str | Path, settings: dict, version: str) -> Path:
    """Run artifacts of `version` (`base` holds the untrained base model's evaluation)."""
    return artifact_root(root, settings) / version


@lru_cache(maxsize=512)
def _spec(pattern: str):
    import pathspec

    # Anchored at the workspace root: `recipe.yaml` is the root's, not any folder's (gitignore would match both).
    return pathspec.GitIgnoreSpec.from_lines([pattern if pattern.startswith("/") else "/" + pattern])


def path_matches(path: str, pattern: str) -> bool:
    """Whether a workspace path matches a `paths.allowed` / `paths.protected` glob (gitignore syntax, rooted:
    `*` stays within a folder, `**` crosses folders). The candidate guard and the tampering audit both ask here."""
    return _spec(pattern).match_file(path.replace("\\", "/").removeprefix("./"))
