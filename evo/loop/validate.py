"""`evo validate`: the cheap checks a CI gate runs on every version's PR."""

from __future__ import annotations

from pathlib import Path

from evo.errors import ConfigError
from evo.loop import gate as gating
from evo.recipe import load_recipe
from evo.resources import resource_dir
from evo.settings import LoopSettings, load_settings
from evo.train.recipe_check import check_against_domain


def validate_workspace(root: Path) -> dict:
    """Validate evo.yaml and recipe.yaml, load every analyzer and skill, estimate the cost.

    Raises the first ConfigError found; returns what was checked.
    """
    from evo.agent.skills import load_skills
    from evo.harness.isolation import load_analyzers

    root = Path(root)
    checked = []
    settings = load_settings(root)
    checked.append("evo.yaml")
    recipe = load_recipe(root / "recipe.yaml")
    check_against_domain(recipe)
    checked.append(f"recipe.yaml ({recipe['domain']['name']}, {recipe['model']['name']})")
    analyzers, problems = load_analyzers([resource_dir("analyzers"), root / "analyzers"], settings)
    if problems:
        first = problems[0]
        raise ConfigError(f"{first.get('file', 'analyzers')}: {first.get('error', first)}; fix or remove the analyzer")
    checked.append(f"{len(analyzers)} analyzers")
    skills = load_skills([resource_dir("skills"), root / "skills"])
    checked.append(f"{len(skills)} skills")
    gate = LoopSettings.of(settings).gate
    cost = gating.estimate(recipe, gate)
    waits = gating.needs_approval(cost, gate)
    checked.append(
        f"estimated {cost.gpu_hours:.4f} GPU-h ({'needs approval' if waits else 'under the approval threshold'})"
    )
    return {"checked": checked, "estimate": cost.as_dict(), "needs_approval": waits}
