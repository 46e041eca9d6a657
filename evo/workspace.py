"""`evo init`: create (or adopt an empty) git repository as an EvoTrainer workspace.

The new workspace is `workspace_template/` (settings rendered for the chosen
domain, model and agent) plus the built-in analyzers, skills, trainer prompts
and the domain's tiny recipe, committed on `main` as the baseline v0: branch
`evo/v0`, tag `evo/promoted/v0`, and its `created` + `promoted` lineage events.
Everything is validated before the first file is written, so a bad option
leaves the folder as it was.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from string import Template

from evo.errors import WorkspaceError
from evo.recipe import parse_recipe, set_path
from evo.resources import resource_dir
from evo.settings import SETTINGS_FILE, normalize_settings
from evo.train.recipe_check import check_against_domain
from evo.yamlio import dump_yaml, parse_yaml, read_text

DEFAULT_DOMAIN = "arithmetic"
DEFAULT_AGENT = "heuristic"
SETTINGS_TEMPLATE = "evo.yaml.in"
BUILTIN_FOLDERS = ("analyzers", "skills", "trainer_prompts")
_SKIP = {"__pycache__", ".DS_Store"}


def available_domains() -> list[str]:
    """Domains with a built-in `<domain>-tiny.yaml` recipe."""
    return sorted(p.name[: -len("-tiny.yaml")] for p in resource_dir("recipes").glob("*-tiny.yaml"))


def baseline_recipe(domain: str | None, model: str | None, recipe: str | Path | None = None) -> tuple[str, dict]:
    """The baseline recipe's text and its parsed form: `recipe` when given (e.g. a
    human-engineered one; its domain unless `domain` says otherwise), else the
    built-in tiny recipe of `domain`; `model.name` replaced when `model` is given."""
    if recipe is not None:
        path = Path(recipe).expanduser()
        if not path.is_file():
            raise WorkspaceError(f"--recipe: {str(path)!r} is not a file; give the path of a recipe YAML")
        found = parse_recipe(read_text(path), source=str(path))["domain"]["name"]
        if domain is not None and found != domain:
            raise WorkspaceError(f"--recipe: {path} trains domain {found!r} but --domain is {domain!r}; drop --domain or pick a matching recipe")
    else:
        domain = domain or DEFAULT_DOMAIN
        path = resource_dir("recipes") / f"{domain}-tiny.yaml"
        if not path.is_file():
            raise WorkspaceError(
                f"--domain: unknown domain {domain!r} (no built-in recipe {domain}-tiny.yaml); "
                f"use one of {', '.join(available_domains()) or 'none'}"
            )
    text = read_text(path)  # binary, non-UTF-8 or oversized: one line naming the file
    if model is not None:
        text = _replace_model_name(text, model)
    # A broken built-in (or a model id the recipe schema refuses, or domain options the domain refuses) must not
    # become v0.
    source = f"recipe.yaml (from {path.name})"
    parsed = parse_recipe(text, source=source)
    check_against_domain(parsed, source=str(path) if recipe is not None else source)
    return text, parsed


def _replace_model_name(text: str, model: str) -> str:
    """Set `model.name` keeping the recipe's comments and layout where possible."""
    pattern = re.compile(r"^(model:[ \t]*\n(?:[ \t]+.*\n|[ \t]*#.*\n|[ \t]*\n)*?[ \t]+name:[ \t]*)(.*)$", re.MULTILINE)
    replaced, count = pattern.subn(lambda m: m.group(1) + json.dumps(model), text, count=1)
    if count:
        return replaced
    return dump_yaml(set_path(parse_yaml(text, source="recipe.yaml"), "model.name", model))


def render_settings(domain: str, model: str, agent: str) -> str:
    template = Template((resource_dir("workspace_template") / SETTINGS_TEMPLATE).read_text(encoding="utf-8"))
    # JSON strings are valid YAML scalars, so any model id or path is quoted safely.
    text = template.substitute(domain=json.dumps(domain), model=json.dumps(model), agent=json.dumps(agent))
    normalize_settings(parse_yaml(text, source=SETTINGS_FILE), source=SETTINGS_FILE)
    return text


def is_workspace(path: str | Path) -> bool:
    """True when `path` already holds an initialised workspace (evo.yaml + baseline v0)."""
    path = Path(path)
    if not (path / SETTINGS_FILE).is_file() or not (path / ".git").exists():
        return False
    from evo.lineage import Lineage  # git work stays in evo.lineage

    try:
        return "v0" in Lineage.open(path).versions()
    except WorkspaceError:
        return False


def _copy_tree(src: Path, dst: Path, *, skip: set[str] = frozenset()) -> None:
    # Not shutil.copytree: it would also copy the package folders' modes onto
    # the user's existing folder (the workspace root).
    for item in sorted(src.iterdir()):
        if item.name in _SKIP or item.name in skip:
            continue
        target = dst / item.name
        if item.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            _copy_tree(item, target)
        else:
            shutil.copy2(item, target)


def init_workspace(path: str | Path, domain: str | None = None, model: str | None = None,
                   agent: str | None = None, force: bool = False, recipe: str | Path | None = None) -> Path:
    """Create a workspace at `path` and commit its baseline as v0; returns the root.

    `path` may be missing, empty, or an empty git repository (e.g. a fresh clone);
    anything else needs `force`. Raises WorkspaceError if it already is one.
    """
    from evo.lineage.bootstrap import bootstrap_repository, prepare_repository

    root = Path(path).expanduser().absolute()
    if is_workspace(root):
        raise WorkspaceError(f"'{root}' is already an EvoTrainer workspace (v0 exists); nothing changed")
    if root.exists() and not root.is_dir():
        raise WorkspaceError(f"'{root}' is a file; give a folder for the workspace")
    recipe_text, parsed = baseline_recipe(domain, model, recipe)
    domain = parsed["domain"]["name"]
    agent = agent or DEFAULT_AGENT
    settings_text = render_settings(domain, parsed["model"]["name"], agent)

    prepare_repository(root, force=force)  # validates emptiness before writing anything
    template = resource_dir("workspace_template")
    _copy_tree(template, root, skip={SETTINGS_TEMPLATE})
    (root / SETTINGS_FILE).write_text(settings_text, encoding="utf-8")
    (root / "recipe.yaml").write_text(recipe_text, encoding="utf-8")
    for kind in BUILTIN_FOLDERS:
        (root / kind).mkdir(exist_ok=True)
        _copy_tree(resource_dir(kind), root / kind)
    bootstrap_repository(root, domain=domain, agent=agent)
    return root
