"""Helpers shared by command modules: workspace option, --json output, console."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import click


def _workspace_root(_ctx, _param, value: Path) -> Path:
    """The workspace holding `value` (any subfolder or version worktree of it), as git finds
    its top level; the path as given when it is in none, so the command names it in its error."""
    from evo.lineage.store import find_workspace_root

    return find_workspace_root(value) or value


workspace_option = click.option(
    "-C",
    "--workspace",
    "workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    callback=_workspace_root,
    help="Workspace directory, or any folder inside it (default: the workspace holding the current folder).",
)

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")


def emit(data: Any, as_json: bool, render: Callable[[Any], None]) -> None:
    """Print `data` as JSON, or hand it to `render` for humans.

    Compact on purpose: `indent` makes Python fall back to its pure-Python
    encoder, which costs ~0.1 s for `evo log --json` at 1,000 versions.
    """
    if as_json:
        click.echo(json.dumps(data, default=str))
    else:
        render(data)


def console():
    from rich.console import Console

    return Console(highlight=False)
