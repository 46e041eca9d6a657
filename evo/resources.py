"""Where the shipped resource folders live.

`recipes/`, `analyzers/`, `skills/`, `trainer_prompts/` and `workspace_template/`
sit at the repository root in a checkout and under `evo/_assets/` in a wheel.
They are loaded by path, never imported, so built-ins and a workspace's own
files go through the same loaders.
"""

from __future__ import annotations

from pathlib import Path

from evo.errors import EvoError

_PACKAGE_DIR = Path(__file__).resolve().parent
_KINDS = ("recipes", "analyzers", "skills", "trainer_prompts", "workspace_template")


def resource_dir(kind: str) -> Path:
    """Return the folder holding the built-in resources of `kind`."""
    if kind not in _KINDS:
        raise EvoError(f"unknown resource kind {kind!r}; expected one of {', '.join(_KINDS)}")
    for candidate in (_PACKAGE_DIR / "_assets" / kind, _PACKAGE_DIR.parent / kind):
        if candidate.is_dir():
            return candidate
    raise EvoError(f"built-in {kind}/ folder is missing from the installation; reinstall evotrainer")


def data_dir() -> Path:
    """Package data shipped inside `evo/` (the tiny model checkpoint, arithmetic splits)."""
    return _PACKAGE_DIR / "data"
