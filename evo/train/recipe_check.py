"""A recipe checked against its domain before anything is committed or trained.

The recipe schema (`evo.recipe`) knows no domain. What depends on one, the
trainer checks when it starts: the domain's options, the reward terms and the
filters' components against the components the domain emits, the evaluation
split. `check_against_domain` runs those checks where a recipe is read — `evo
init`, `evo validate`, an agent's candidate — so a bad recipe is one line
before v0 is committed or a candidate trains, not a failed first step after.
"""

from __future__ import annotations

from evo.errors import ConfigError

TASK_FILE_OPTIONS = ("train_file", "validation_file", "files")


def domain_components(env, recipe: dict) -> list[str]:
    """The reward components a run of `recipe` scores: the domain's, plus the model judge's when one is set."""
    from evo.train.judge_model import COMPONENT as JUDGE_COMPONENT

    judged = bool((recipe.get("reward") or {}).get("model_judge"))
    return list(env.reward_components) + ([JUDGE_COMPONENT] if judged else [])


def check_against_domain(recipe: dict, *, source: str = "recipe.yaml") -> None:
    """Raise ConfigError (naming `source`) when the normalised `recipe` asks its domain for what it lacks.

    The task-file options are left out, and with them the split check: a
    relative path resolves in the workspace, where the run reads it (and says so
    when it is missing). Without them the shipped splits are listed.
    """
    from evo.domains import get_environment
    from evo.train.filters import FilterConfig
    from evo.train.rewards import check_terms

    options = dict(recipe["domain"].get("options") or {})
    try:
        env = get_environment(recipe["domain"]["name"], {k: v for k, v in options.items() if k not in TASK_FILE_OPTIONS})
        components = domain_components(env, recipe)
        check_terms(recipe["reward"]["terms"], components)
        FilterConfig.from_recipe(recipe.get("filters")).check_std_component(components)
        if not any(k in options for k in TASK_FILE_OPTIONS):
            env.tasks(recipe["eval"]["split"])
    except ConfigError as exc:
        message = str(exc)
        if source != "recipe.yaml" and message.startswith("recipe.yaml:"):
            message = source + message[len("recipe.yaml"):]
        raise ConfigError(message) from None
