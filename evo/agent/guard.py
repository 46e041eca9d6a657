"""The candidate guard: the orchestrator's check of an agent's diff before anything is committed.

An agent may say anything in its manifest; the guard checks what it did.
A candidate is rejected, with one recorded line, when

- the manifest fails its schema;
- a changed path is outside `paths.allowed` (evo.yaml), or inside `paths.protected`
  (a declared harness revision may touch the protected file it names as its factor,
  e.g. an audit analyzer; nothing else may);
- the new `recipe.yaml` fails validation;
- a continue-training candidate (kind `continue`, factor `continue`) changes
  a recipe key or a harness file: continuing means training the parent's
  recipe as it is;
- the declared factor does not match the diff: a recipe factor whose diff is
  empty or also changes another key, a file factor that did not change, or a
  second factor-bearing change beside the declared one (a recipe change beside an
  analyzer edit, two analyzers). `eval.*` keys are the measurement, so they
  are harness factors; every other recipe key is a policy factor.

`skills/**` and `memory/**` are bookkeeping: they may change beside any factor.
`.evo/` is the agent's git-ignored scratch space (the manifest lives there) and is
never part of the diff.
"""

from __future__ import annotations

from evo.agent.manifest import normalize_manifest
from evo.agent.recipe_diff import covers, leaf_diff
from evo.errors import AgentError, ConfigError
from evo.recipe import normalize_recipe, parse_recipe
from evo.settings import path_matches
from evo.train.recipe_check import check_against_domain

BOOKKEEPING = ("skills/", "memory/")
SCRATCH = ".evo/"
HARNESS_RECIPE_PREFIX = "eval."
CONTINUE = "continue"  # the factor of a continue-training candidate


def glob_match(path: str, pattern: str) -> bool:
    return path_matches(path, pattern)


def _reject(reason: str) -> AgentError:
    return AgentError(f"candidate rejected: {reason}")


def _under(path: str, factor: str) -> bool:
    return path == factor or path.startswith(factor.rstrip("/") + "/")


def check_candidate(changed_paths: list[str], manifest: dict, recipe_before: dict, recipe_after_text: str,
                    settings: dict) -> None:
    """Raise AgentError("candidate rejected: <reason>") when the candidate breaks a rule above; return None otherwise."""
    try:
        manifest = normalize_manifest(manifest, source="manifest")
    except AgentError as exc:
        raise _reject(str(exc)) from None
    kind, factor = manifest["kind"], manifest["factor"]
    paths = sorted({p.replace("\\", "/").removeprefix("./") for p in changed_paths})
    paths = [p for p in paths if not p.startswith(SCRATCH)]

    allowed = settings.get("paths", {}).get("allowed", [])
    protected = settings.get("paths", {}).get("protected", [])

    def check_path(path: str) -> None:
        if not any(glob_match(path, g) for g in allowed):
            raise _reject(f"{path} is outside the paths an agent may change ({', '.join(allowed)}; evo.yaml paths.allowed)")
        hit = next((g for g in protected if glob_match(path, g)), None)
        if hit and not (kind == "harness" and path == factor):
            raise _reject(f"{path} is protected ({hit!r} in evo.yaml paths.protected); only a declared harness revision naming it as its factor may change it")

    for path in paths:
        check_path(path)

    try:
        after = parse_recipe(recipe_after_text, source="recipe.yaml")
        check_against_domain(after)
    except ConfigError as exc:
        raise _reject(f"the new recipe is invalid: {exc}") from None
    try:
        before = normalize_recipe(recipe_before, source="parent recipe")
    except ConfigError:
        before = recipe_before  # already normalised by the caller; defaults make it valid
    diff = sorted(leaf_diff(before, after))
    if kind == "continue" or factor == CONTINUE:
        if kind != "continue" or factor != CONTINUE:
            raise _reject(f"kind {kind!r} with factor {factor!r}: continue-training is kind 'continue' with factor {CONTINUE!r}")
        moved = diff[:1] or [p for p in paths if p != "recipe.yaml" and not p.startswith(BOOKKEEPING)][:1]
        if moved:
            raise _reject(f"a continue-training candidate trains the parent's recipe unchanged, but {moved[0]} changed; "
                          "declare the change as its own policy or harness candidate")
        return
    if not paths and not diff:
        raise _reject(f"the candidate changes nothing, but its manifest declares factor {factor!r}")
    if diff and "recipe.yaml" not in paths:
        # The recipe is compared by content, so a change the caller's path list missed still counts.
        check_path("recipe.yaml")
        paths.append("recipe.yaml")
    factor_files = [p for p in paths if p != "recipe.yaml" and not p.startswith(BOOKKEEPING)]

    if "/" not in factor and factor not in paths:  # a recipe key
        if kind == "harness" and not factor.startswith(HARNESS_RECIPE_PREFIX):
            raise _reject(f"factor {factor!r} is a training setting, not the harness; declare kind 'policy' (harness recipe factors are eval.*)")
        if kind == "policy" and factor.startswith(HARNESS_RECIPE_PREFIX):
            raise _reject(f"factor {factor!r} changes the measurement, not the policy; declare kind 'harness'")
        if not diff:
            raise _reject(f"the manifest declares factor {factor!r} but the recipe does not change")
        stray = [d for d in diff if not covers(factor, d)]
        if stray:
            raise _reject(f"the manifest declares factor {factor!r} but the recipe diff also changes {stray[0]}; one factor per candidate")
        if factor_files:
            raise _reject(f"the manifest declares recipe factor {factor!r} but {factor_files[0]} also changed; split it into its own candidate")
        return

    if kind == "policy":
        raise _reject(f"a policy intervention's factor must be a recipe key (e.g. rollout.max_new_tokens), not the file {factor!r}; declare kind 'harness'")
    if not any(_under(p, factor) for p in paths):
        raise _reject(f"the manifest declares harness factor {factor!r} but that file did not change")
    if diff:
        raise _reject(f"the harness revision {factor!r} also changes the recipe ({diff[0]}); one factor per candidate")
    stray = [p for p in factor_files if not _under(p, factor)]
    if stray:
        raise _reject(f"the manifest declares factor {factor!r} but {stray[0]} also changed; one factor per candidate")
