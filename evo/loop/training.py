"""The phases that spend compute: gate -> control -> run (-> replicates) -> evaluate.

`gate` estimates every run the step will train and waits for approval above
the threshold. `control` trains (or reuses) the parent's counterfactual
continuation (`evo.loop.runs`), `run` the version itself — or nothing, for a
harness revision or a continuation that reuses its control's run — and
`replicates` its other training seeds (for v0, the noise-floor calibration).
`evaluate` records the version's Avg@k. Each records what it trained, with
the artifacts' sha256, in the lineage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from evo.domains import with_option_defaults
from evo.errors import WorkspaceError
from evo.loop import gate as gating
from evo.loop import runs as R
from evo.loop import versions as V
from evo.loop.journal import Journal, fault_point
from evo.loop.runs import Plan
from evo.recipe import get_path
from evo.settings import artifact_dir, artifact_root
from evo.train.records import read_json_if
from evo.train.run import EXTENDED_FROM, extend_run, holds_run, trains_as_now
from evo.train.schedule import rate_ignores_length
from evo.vocabulary import event_id


def estimate(ws, plan: Plan, parent: str | None, parent_recipe: dict | None,
             version: str | None = None) -> gating.CostEstimate:
    """Every run this step trains: the version under each seed (less those an earlier version already trained,
    `shared_run`), the missing control runs (less those an ancestor's control already trained, and the steps of
    a shorter one they extend), calibration. `version`: the candidate, once committed (a dry run has none)."""
    runs = []
    if plan.trains:
        reused = sum(1 for seed in plan.seeds if shared_run(ws, version, plan, parent, seed, verify=False) is not None)
        runs += [plan.recipe] * (len(plan.seeds) + len(plan.calibration) - reused)
    if plan.control or plan.kind == "continue":
        records = ws.lineage.read_all()
        have = R.control_events(records.get(parent))
        for seed in plan.seeds:
            key = R.control_key(plan.control_steps, seed)
            if key in have or shared_control(ws, parent, parent_recipe, key, verify=False) is not None:
                continue
            base = extension(ws, parent, parent_recipe, plan.control_steps, seed, verify=False)
            runs.append(R.control_recipe(parent_recipe, plan.control_steps - (base[2] if base else 0), seed))
    return gating.estimate_runs(runs, ws.config.gate, eval_recipe=plan.recipe if not plan.trains else None)


def gate(ws, journal: Journal, version: str, estimate: dict) -> bool:
    """Record the gate event; False while the version waits for `evo approve`."""
    journal.begin("gate")
    events = [e.get("event") for e in ws.lineage.events(version)]
    threshold = ws.config.gate.approval_above_gpu_hours
    approved = estimate["gpu_hours"] <= threshold or "approved" in events
    status = "approved" if approved else "awaiting-approval"
    ws.lineage.append_event(version, {
        "id": event_id(version, "gated", status), "event": "gated", "version": version,
        "estimate": estimate, "threshold": threshold, "status": status,
    })
    if not approved:
        ws.say(f"{version} awaits approval: estimated {estimate['gpu_hours']:.3f} GPU-h > {threshold:g}")
        return False
    journal.complete("gate", {"estimate": estimate, "status": status})
    return True


def repair_start(ws, parent: str, recipe: dict) -> str | None:
    """Where a repair trains from: the last policy on its path trained without the setting it undoes
    (and any policy version of a parent its own training harmed: the last policy on its path it did not).

    A version is a repair when its recipe undoes the setting a `repair` skill
    names (the skill's `requires` hold on the parent's recipe and not on this
    one), whoever made the change: the heuristic, an LLM agent, a person. The
    parent's weights were trained under that setting, so a child continuing
    from them keeps the harm: measured on calc (seed 0), dropping a
    multiplicative efficiency factor from a harmed v0's weights gave -0.018
    [-0.097, +0.059] against v0 continued, 83% of episodes still one turn (a
    working-tree run); from the base model, +0.338 [+0.255, +0.417] (a clean
    checkout). So the
    repair walks up first parents while the ancestor's recipe still meets the
    requirements of any repair skill (for this domain) the version undoes, and
    trains from the first one that meets none, or from the base model
    (`V.BASE`) past v0. None: train from the parent.

    A limit lifted on a policy that learned to avoid its tool is a repair too
    (`_lifted_limit`): the version raises `domain.options.max_turns` or
    `rollout.max_total_tokens`, and the parent's training episodes called a
    tool less than half as often in its last third of steps as in its first
    (TOOL_ABANDONED). Measured on calc: under `max_turns: 1` and under
    `max_total_tokens: 24` v0 stopped calling the calculator (13% -> 0% and
    18% -> 3% of episodes); the raised limit trained from v0's weights scored
    0.118 and 0.215 against its controls' 0.117 and 0.175, the same recipe from
    the base model 0.425 and 0.389. It walks up first parents while the
    ancestor trained under a limit no higher than the parent's.

    Whatever the change, a start whose own training harmed it is walked past
    too (`V.harmed_by_training`: the collapse audit vetoed it, or its verdict
    is a regression, for v0 against the base model): a child would inherit the
    harm. Measured on calc at ten times the default learning rate (seed 8): v0
    fell to 0.000 with every recent group dead, and its continuation from those
    weights stayed at 0.000 with a KL of 0.03, since a dead group carries no
    gradient. So any policy version of such a v0 trains from the base model.
    """
    from evo.agent.conditions import check_requirement
    from evo.agent.skills import load_skills

    records, recipes = ws.lineage.read_all(), {}
    recipe = with_option_defaults(recipe)  # a limit the recipe leaves to the domain still binds (calc: 3 turns)

    def recipe_at(name: str) -> dict:  # each ancestor's recipe parsed once, whatever the skills and the walk ask
        if name not in recipes:
            recipes[name] = with_option_defaults(V.recipe_of(ws.lineage, name))
        return recipes[name]

    def walk_while(held, origin: str = parent) -> str:
        current: str | None = origin
        while current is not None and held(current):
            parents = records[current].parents
            current = parents[0] if parents else None
        return current or V.BASE

    def harm(name: str) -> bool:
        return V.harmed_by_training(records, name)

    def harmed(skill, name: str) -> bool:
        return all(check_requirement(r, recipe_at(name)) for r in skill.requires)

    domain = (recipe.get("domain") or {}).get("name", "")
    undone = [skill for skill in load_skills(ws.root)
              if skill.repair and skill.requires and skill.applies_to(domain) and harmed(skill, parent)
              and not all(check_requirement(r, recipe) for r in skill.requires)]  # kept settings are not repaired
    if undone:  # past every ancestor trained under any of the settings this version undoes (or harmed)
        return walk_while(lambda name: harm(name) or any(harmed(skill, name) for skill in undone))
    lifted = _lifted_limit(ws, parent, recipe_at(parent), recipe)
    if lifted is not None:
        path, limit = lifted
        return walk_while(lambda name: harm(name) or _limit(recipe_at(name), path) <= limit)
    return walk_while(harm) if harm(parent) else None


LIMITS = ("domain.options.max_turns", "rollout.max_total_tokens")  # budgets a tool-using episode must fit in
TOOL_ABANDONED = 0.5  # recent tool-use share below this fraction of the first third's: the policy learned to avoid it


def _limit(recipe: dict, path: str) -> float:
    value = get_path(recipe, path)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else float("inf")


def _lifted_limit(ws, parent: str, parent_recipe: dict, recipe: dict) -> tuple[str, float] | None:
    """(path, the parent's value) of a limit this recipe raises over a parent that learned to avoid its tool."""
    raised = [(path, _limit(parent_recipe, path)) for path in LIMITS if _limit(recipe, path) > _limit(parent_recipe, path)]
    if not raised:
        return None
    metrics = (read_json_if(artifact_dir(ws.root, ws.settings, parent) / "diagnosis.json") or {}).get("metrics", {})
    first, recent = metrics.get("behavior/tool_use_frac_first"), metrics.get("behavior/tool_use_frac_recent")
    if not (isinstance(first, (int, float)) and isinstance(recent, (int, float)) and first > 0):
        return None
    return raised[0] if recent < TOOL_ABANDONED * first else None


def _init_of(ws, source: str | None, parent: str | None) -> str | None:
    """The checkpoint a run starting from `source`'s policy loads (None: the recipe's base model).

    A repair's start is an older policy than the parent's, which the step's
    tamper check does not cover: its recorded files, the weights included, are
    checked here before anything trains from them.
    """
    if source in (None, V.BASE):
        return None
    if source != parent:
        records = ws.lineage.read_all()
        folders = [artifact_dir(ws.root, ws.settings, name) for name in V.policy_source(records, source)]
        problems = R.verify_runs(ws.root, ws.settings, records, folders, names=None)
        if problems:
            raise WorkspaceError(f"not training from {source}'s policy: {problems[0]}")
    return V.checkpoint_of(ws.root, ws.settings, source)


def train(ws, recipe: dict, out: Path, init, version: str, parent: str | None, *, files_of: str | None = None,
          extend: tuple[Path, dict, int] | None = None) -> dict:
    """One training run, on `run.nproc` data-parallel processes when evo.yaml says so (resumable either way).

    From a parent's checkpoint the run continues the parent's prompt schedule
    (`V.schedule_end`): more steps see new prompts, as a longer run would.
    `parent` is the version whose policy the run starts from (a repair's is an
    ancestor, or `V.BASE`; None for v0).
    Workspace files the recipe names (a model judge's rubric) are read from the
    version `files_of` (default `version`): the one whose recipe this is.
    `extend`: (a finished shorter run, the recipe that trained it, its steps; `extension`) to start
    from when `out` holds nothing yet (`evo.train.run.extend_run`).
    """
    from evo.train.launch import run_training

    recipe = _with_version_files(ws, recipe, out, files_of or version)
    if extend is not None and not holds_run(out):
        held = extend_run(extend[0], out, recipe, extend[1], version=version)
        if held:
            ws.say(f"  starting from {extend[0].name}, the same run {held} steps in")
    offset = V.schedule_end(ws.lineage.read_all(), parent) if parent else 0
    res = run_training(recipe, out, init_checkpoint=init, version=version, progress=ws.progress,
                       nproc=ws.config.run.nproc, launcher=ws.config.run.launcher, step_offset=offset)
    return res.summary


def _with_version_files(ws, recipe: dict, out: Path, version: str) -> dict:
    """The recipe with a relative rubric path replaced by that version's copy of the file, kept in the run folder.

    A rubric is a workspace file an agent may evolve; the run must score with the
    rubric of the version it trains, not whatever the current folder holds.
    """
    rubric = _workspace_rubric(recipe)
    if rubric is None:
        return recipe
    import copy

    text = ws.lineage.file_at(version, rubric)
    target = Path(out) / "rubric" / Path(rubric).name
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")
    out_recipe = copy.deepcopy(recipe)
    out_recipe["reward"]["model_judge"]["rubric"] = str(target.resolve())
    return out_recipe


def control(ws, version: str, plan: Plan, parent: str, parent_recipe: dict) -> dict:
    """Train (or reuse) the parent's continuation under this candidate's schedule, one run per seed."""
    from evo.loop.judge import continuation_of

    steps = plan.control_steps
    init = V.checkpoint_of(ws.root, ws.settings, parent)
    reused, trained = [], []
    for seed in plan.seeds:
        key = R.control_key(steps, seed)
        if key in R.control_events(ws.lineage.record(parent)):
            reused.append(key)
            continue
        out = R.control_dir(ws.root, ws.settings, parent, key)
        recipe = R.control_recipe(parent_recipe, steps, seed)
        shared = shared_control(ws, parent, parent_recipe, key)
        if shared is not None:  # the same training was done for an ancestor whose policy this one is
            source, event = shared
            ws.say(f"control: {parent}'s recipe continued for {steps} steps (seed {seed}): "
                   f"the run of {source}'s control {key}, the same training")
            R.clone_run(artifact_root(ws.root, ws.settings) / event["run"], out)
            from evo.train.evaluate import evaluate

            evaluate(out / "checkpoint", recipe, out)  # measured as this parent measures: its eval, its tasks
            summary = json.loads((out / "summary.json").read_text())
        else:
            ws.say(f"control: {parent}'s recipe continued for {steps} steps (seed {seed})")
            summary = train(ws, recipe, out, init, f"{parent}~{key}", parent, files_of=parent,
                            extend=None if holds_run(out) else extension(ws, parent, parent_recipe, steps, seed))
        fault_point("control", "mid")  # trained, not yet recorded: resume must reuse the run
        extended = None if shared else read_json_if(out / EXTENDED_FROM)
        held = int(extended["steps"]) if extended else 0
        if extended:
            extended["run"] = str(Path(extended["run"]).relative_to(artifact_root(ws.root, ws.settings)))
        ws.diagnose(parent, parent_recipe, out_dir=out, run_dir=out)
        runs = [R.control_dir(ws.root, ws.settings, parent, R.control_key(steps, s))
                for s in plan.seeds if s <= seed]
        continuation = continuation_of(artifact_dir(ws.root, ws.settings, parent), runs,
                                       noise=R.workspace_noise(ws.lineage.read_all()),
                                       B=ws.config.search.bootstrap_samples)
        ev = R.eval_summary(out)
        ws.lineage.append_event(parent, {
            "id": event_id(parent, "control", key), "event": "control", "version": parent, "key": key,
            "steps": steps, "seed": seed, "for": version, "run": str(out.relative_to(artifact_root(ws.root, ws.settings))),
            "artifacts": R.artifact_list(out), "avg_at_k": ev["avg_at_k"],
            "per_stratum": ev.get("per_stratum", {}), "continuation": continuation,
            # what this event trained: nothing when it reuses an ancestor's control run, the extra steps of one
            # it extended
            "estimate": {} if shared else gating.estimate(R.control_recipe(parent_recipe, steps - held, seed),
                                                          ws.config.gate).as_dict(),
            "grpo_steps": 0 if shared else steps - held,
            "shared_from": (shared[1].get("shared_from") or shared[1]["run"]) if shared else None,  # who trained it
            "extended_from": extended.get("run") if extended else None,
            "metrics": summary.get("final", {}),
        })
        (reused if shared else trained).append(key)
    return {"reused": reused, "trained": trained}


def extension(ws, parent: str, parent_recipe: dict, steps: int, seed: int, *,
              verify: bool = True) -> tuple[Path, dict, int] | None:
    """(run folder, the recipe that trained it, its steps): the longest finished control under `seed`, shorter
    than `steps`, that a `steps`-step control of `parent` starts from (`evo.train.run.extend_run`), or None.

    The parent's own controls, and those of the ancestors whose policy a
    harness-only revision shares (`V.policy_source`) where the recipe trains
    alike: the same checkpoint, schedule offset and training, so their first
    steps are this control's. Only under a constant-rate schedule (the first
    steps of a longer run are the shorter run's) and without a workspace rubric
    (a run's copy of it lives in its own folder). A run whose recorded sha256s
    changed is never extended (`verify`; the cost estimate skips the hashing).
    """
    if not rate_ignores_length(parent_recipe["grpo"]) or _workspace_rubric(parent_recipe):
        return None
    records = ws.lineage.read_all()
    found = []
    for source in _sources_training_alike(ws, records, parent, parent_recipe):
        for ev in R.control_events(records.get(source)).values():
            folder = artifact_root(ws.root, ws.settings) / ev["run"]
            if int(ev.get("seed", -1)) == int(seed) and int(ev["steps"]) < int(steps) and R.is_finished(folder) \
                    and trains_as_now(folder):
                found.append((int(ev["steps"]), folder, R.trained_by(ev, source)))
    if not found:
        return None
    held, folder, trained_by = max(found, key=lambda f: f[0])
    changed = R.verify_runs(ws.root, ws.settings, records, [folder], names=None) if verify else []
    if changed:
        ws.say(f"control: not extending {folder.name}, training it afresh: {changed[0]}")
        return None
    return folder, R.control_recipe(V.recipe_of(ws.lineage, trained_by), held, seed), held


def shared_control(ws, parent: str, parent_recipe: dict, key: str, *, verify: bool = True) -> tuple[str, dict] | None:
    """(ancestor, its `control` event) whose control run `key` is exactly the training this one would do, or None.

    A harness-only revision shares its parent's policy (`V.policy_source`): the
    same checkpoint and prompt schedule. When its recipe also trains the same
    way (equal outside `eval`, the same rubric file where a model judge reads
    one), the ancestor's control under the same steps and seed is the same run;
    only its evaluation may differ, so the clone is evaluated again. Training it
    again would spend the steps twice. A run whose files no longer match the
    sha256 the lineage recorded for them (the checkpoint included) is never
    reused: the control is trained afresh from the parent's checkpoint (`verify`; the cost estimate skips
    the hashing, the phase that clones does it).
    """
    records = ws.lineage.read_all()
    for source in _sources_training_alike(ws, records, parent, parent_recipe)[1:]:
        event = R.control_events(records.get(source)).get(key)
        folder = artifact_root(ws.root, ws.settings) / event["run"] if event else None
        if folder is None or not R.is_finished(folder) or not trains_as_now(folder):
            continue
        changed = R.verify_runs(ws.root, ws.settings, records, [folder], names=None) if verify else []
        if changed:
            ws.say(f"control: not reused, training it again: {changed[0]}")
            return None
        return source, event
    return None


def _sources_training_alike(ws, records: dict, parent: str, parent_recipe: dict) -> list[str]:
    """`parent`, then the ancestors whose policy it shares (`V.policy_source`) whose recipe trains as its does:
    their control runs are the training a control of `parent` would do."""
    return [source for source in V.policy_source(records, parent)
            if source == parent or _trains_alike(ws, parent, parent_recipe, source, V.recipe_of(ws.lineage, source))]


def _trains_alike(ws, a: str, recipe_a: dict, b: str, recipe_b: dict) -> bool:
    def training(recipe):
        return {k: v for k, v in recipe.items() if k != "eval"}

    if training(recipe_a) != training(recipe_b):
        return False
    rubric = _workspace_rubric(recipe_a)
    return rubric is None or ws.lineage.file_at(a, rubric) == ws.lineage.file_at(b, rubric)


def _workspace_rubric(recipe: dict) -> str | None:
    """The model judge's rubric when it is a workspace file (relative: each version has its own), else None."""
    judge = (recipe.get("reward") or {}).get("model_judge")
    return judge["rubric"] if judge and not Path(judge["rubric"]).expanduser().is_absolute() else None


class SharedRun(NamedTuple):
    """An earlier run that is exactly the training a policy version would do (`shared_run`)."""

    source: str  # the earlier version
    origin: str  # the run folder (under the artifact root) that trained it: the first, where it was itself reused
    folder: Path  # that version's run folder under the seed


def shared_run(ws, version: str | None, plan: Plan, parent: str | None, seed: int, *,
               verify: bool = True) -> SharedRun | None:
    """The earlier run under `seed` that is exactly the training this policy version would do under `seed`, or None.

    The heuristic re-tests an inconclusive intervention under a harness
    revision (the same policy change with `eval.k` doubled); an agent may
    propose a change a sibling already made, or make it below a harness-only
    revision. Same start policy (the parent's, or a repair's ancestor's or the
    base model; a harness-only revision's is its parent's), same place in the
    prompt schedule, same seed,
    and a recipe equal outside `eval` (the same rubric where a model judge reads
    one): training is deterministic, so the earlier run is this run (measured
    on calc: a re-test retrained bit for bit the weights of its first test,
    20 steps spent twice). Only its evaluation may differ, so the clone is
    evaluated again. A run whose recorded files changed is never reused
    (`verify`; the cost estimate skips the hashing, the phase that clones does
    it), nor one that started with a fresh optimizer (`trains_as_now`).
    """
    if plan.kind != "policy" or parent is None or (version is None and _workspace_rubric(plan.recipe)):
        return None  # (a dry run's candidate has no branch to read its rubric from)
    records = ws.lineage.read_all()

    def policy(name: str) -> str:  # the version whose checkpoint `name`'s policy is (past harness-only revisions)
        return name if name == V.BASE else V.policy_source(records, name)[-1]

    start = policy(plan.start or parent)
    offset = V.schedule_end(records, start)  # where `train` starts the run's prompt schedule
    root = artifact_root(ws.root, ws.settings)
    for rec in sorted(records.values(), key=lambda r: r.number):
        trained = (rec.last("trained") or {}) if rec.name != version else {}
        if (not trained or trained.get("from_control") or policy(trained.get("start") or V.BASE) != start
                or int((trained.get("schedule") or {}).get("offset") or 0) != offset):
            continue
        replicated = R.replicate_events(rec)
        if int(trained.get("seed", -1)) == int(seed):
            folder = artifact_dir(ws.root, ws.settings, rec.name)
            origin = trained.get("shared_from") or str(folder.relative_to(root))
        elif int(seed) in replicated:
            event = replicated[int(seed)]
            folder, origin = root / event["run"], event.get("shared_from") or event["run"]
        else:
            continue
        if not R.is_finished(folder) or not trains_as_now(folder):
            continue
        if not _trains_alike(ws, version, plan.recipe, rec.name, V.recipe_of(ws.lineage, rec.name)):
            continue
        if verify and R.verify_runs(ws.root, ws.settings, records, [folder], names=None):
            continue  # its evidence changed since it was recorded: train afresh
        return SharedRun(rec.name, origin, folder)
    return None


def _reuse(ws, version: str, plan: Plan, shared: SharedRun, out: Path) -> None:
    """Make `out` the earlier run `shared` names, evaluated as `version` measures."""
    from evo.train.evaluate import evaluate

    source, origin, folder = shared
    ws.say(f"{version}: the same training as {source}'s run {origin} (same start, schedule, seed and recipe "
           "outside eval): reused, evaluated again")
    R.clone_run(folder, out)
    evaluate(out / "checkpoint", plan.recipe, out)


def run(ws, version: str, plan: Plan, parent: str | None, parent_recipe: dict | None = None) -> dict:
    out = artifact_dir(ws.root, ws.settings, version)
    if plan.kind == "harness":
        V.write_link(ws.root, ws.settings, version, parent)
        return {"checkpoint": V.checkpoint_of(ws.root, ws.settings, parent), "trained": False}
    shared = None
    if plan.kind == "continue":  # the continuation is the control's run: reuse it, train nothing
        steps = plan.control_steps
        sources = [R.control_dir(ws.root, ws.settings, parent, R.control_key(steps, s)) for s in plan.seeds]
        targets = [out] + [R.replicate_dir(ws.root, ws.settings, version, s) for s in plan.seeds[1:]]
        for source, target in zip(sources, targets):
            R.clone_run(source, target)
            if plan.recipe["eval"] != parent_recipe["eval"]:  # a harness revision changed the measurement
                from evo.train.evaluate import evaluate

                evaluate(target / "checkpoint", plan.recipe, target)
        summary = json.loads((out / "summary.json").read_text())
        from_control = R.control_key(steps, plan.seeds[0])
    else:
        source = plan.start or parent
        if plan.start:
            ws.say(f"{version} trains from {plan.start}'s policy, not {parent}'s: the last on its path trained without "
                   "the setting it undoes, or that its own training did not harm (`evo.loop.training.repair_start`)")
        shared = shared_run(ws, version, plan, parent, plan.seeds[0])
        if shared is not None:
            _reuse(ws, version, plan, shared, out)
            summary = json.loads((out / "summary.json").read_text())
        else:
            summary = train(ws, R.with_seed(plan.recipe, plan.seeds[0]), out, _init_of(ws, source, parent), version,
                            source)
        from_control = None
    trained = {
        "id": event_id(version, "trained"), "event": "trained", "version": version,
        "start": plan.start or parent or V.BASE,
        "artifacts": R.artifact_list(out), "metrics": summary.get("final", {}), "seed": plan.seeds[0],
        "from_control": from_control, "shared_from": shared.origin if shared else None,
        "schedule": {"offset": int(summary.get("step_offset") or 0), "steps": int(summary.get("steps") or 0)},
        # what this event trained: nothing for a continuation that reuses its control's run, or a run reused whole
        "estimate": {} if from_control or shared else gating.estimate(plan.recipe, ws.config.gate).as_dict(),
        "grpo_steps": 0 if from_control or shared else int(plan.recipe["grpo"]["steps"]),
    }
    if parent is None:  # the baseline: the base model's evaluation it is judged against, hashed too
        trained["baseline_artifacts"] = R.artifact_list(artifact_dir(ws.root, ws.settings, V.BASE))
    ws.lineage.append_event(version, trained)
    if plan.kind != "bootstrap":
        replicates(ws, version, plan, parent)
    return {"checkpoint": str(out / "checkpoint"), "trained": True}


def replicates(ws, version: str, plan: Plan, parent: str | None) -> dict:
    """The version's recipe under its other training seeds (and, for v0, the calibration seeds)."""
    done = R.replicate_events(ws.lineage.record(version))
    source = plan.start or parent
    init = _init_of(ws, source, parent)
    for seed in plan.seeds[1:] + plan.calibration:
        if seed in done:
            continue
        out = R.replicate_dir(ws.root, ws.settings, version, seed)
        recipe = R.with_seed(plan.recipe, seed)
        shared = shared_run(ws, version, plan, parent, seed) if plan.kind == "policy" else None
        if shared is not None:
            _reuse(ws, version, plan, shared, out)
        elif plan.kind != "continue":
            ws.say(f"replicate: {version} under seed {seed}")
            train(ws, recipe, out, init, version, source)
        ev = R.eval_summary(out)
        ws.lineage.append_event(version, {
            "id": event_id(version, "replicated", f"seed-{seed}"), "event": "replicated", "version": version,
            "seed": seed, "run": str(out.relative_to(artifact_root(ws.root, ws.settings))),
            "artifacts": R.artifact_list(out), "avg_at_k": ev["avg_at_k"], "per_stratum": ev.get("per_stratum", {}),
            "estimate": {} if plan.kind == "continue" or shared else gating.estimate(recipe, ws.config.gate).as_dict(),
            "grpo_steps": 0 if plan.kind == "continue" or shared else int(recipe["grpo"]["steps"]),
            "calibration": seed in plan.calibration, "shared_from": shared.origin if shared else None,
        })
    return {"seeds": plan.seeds[1:] + plan.calibration}


def evaluate(ws, version: str, plan: Plan, ran: dict) -> dict:
    out = artifact_dir(ws.root, ws.settings, version)
    ev = R.eval_summary(out) if ran.get("trained") and (out / "eval.json").exists() else None
    if ev is None:  # train_recipe evaluates its final checkpoint; a harness-only version does not train
        from evo.train.evaluate import evaluate

        ev = evaluate(ran["checkpoint"], plan.recipe, out)
    ws.lineage.append_event(version, {
        "id": event_id(version, "evaluated"), "event": "evaluated", "version": version,
        "avg_at_k": ev["avg_at_k"], "k": ev["k"], "n_tasks": ev["n_tasks"],
        "per_stratum": ev.get("per_stratum", {}), "artifacts": R.artifact_list(out, names=R.EVAL_FILES),
    })
    return {"avg_at_k": ev["avg_at_k"]}
