"""The agent side of a step: propose (with an optional harness revision), commit, backtest.

Everything between the parent's diagnosis and the gate. `propose` asks the
agent (or takes a person's edit on main, or, when nothing is proposed and no
continuation of the parent was measured, proposes measuring one); it checks
what an untrusted agent changed outside its worktree (`evo.loop.tamper`) and
what it changed inside (`evo.agent.guard`). `commit` records the version with
its trailers and `created` event; `backtest` replays the parent's rollouts
under a reward or filter change.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from evo.errors import AgentError
from evo.loop import tamper
from evo.loop import versions as V
from evo.loop.journal import fault_point
from evo.loop.report import describe
from evo.recipe import parse_recipe
from evo.schemas import load_schema
from evo.settings import artifact_dir, artifact_root
from evo.vocabulary import event_id


def propose(ws, version: str, parent: str, parent_recipe: dict, diag_ref: dict, human: dict | None = None) -> dict:
    from evo.agent import AgentContext, get_agent
    from evo.agent.memory import Memory
    from evo.agent.skills import load_skills

    worktree = ws.lineage.create_version(version, [parent])
    ws.lineage.reset_worktree(version)  # a killed propose may have left half an edit
    if human:
        return _human_proposal(ws, version, parent, parent_recipe, Path(worktree), human)
    records = ws.lineage.read_all()
    diagnosis = json.loads(Path(diag_ref["path"]).read_text())
    last = V.last_transition(records)
    again = _remeasure(ws, version, parent, parent_recipe, records, last, Path(worktree))
    if again is not None:
        return again
    agent = get_agent(ws.settings, backend=ws.agent_backend)
    ctx = AgentContext(
        phase="reflect" if last and last.get("outcome") in ("mixed", "insufficient") and not last["reflected"] else "propose",
        harness_revised=False,
        root=ws.root, worktree=Path(worktree), version=version, parent=parent,
        domain=parent_recipe["domain"]["name"], recipe=parent_recipe, diagnosis=diagnosis,
        last_outcome=last, lineage=V.lineage_summaries(records),
        memory=Memory.load(ws.root), skills=load_skills(ws.root),
        settings=ws.settings,
    )
    trusted = agent.name == "heuristic"  # the shipped offline agent; every other backend is checked
    before = None if trusted else tamper.snapshot(ws.lineage, ws.root, ws.settings, parent)
    manifests, usage, violation = _consult(ws, agent, ctx, version, parent, parent_recipe, Path(worktree), before)
    if manifests:
        return {"status": "proposed", "manifests": manifests, "usage": usage, "agent": agent.name, "violation": violation}
    result = _plateau_or_measure(ws, version, parent, parent_recipe, records, diagnosis, usage)
    if result["status"] != "nothing" or "plateau" not in result:
        return result
    # Continuing stopped paying and no lever fires: try the nearest untried lever, judged like any candidate,
    # before the loop stops (an exploration; its manifest says the trigger did not fire), up to search.explore.
    explored = [s for s in ctx.lineage if s["parents"][:1] == [parent] and (s.get("intervention") or {}).get("exploration")
                and not s["intervention"].get("remeasures")]  # a lever measured again is still one lever explored
    budget = ws.config.search.explore
    if len(explored) >= budget:
        tried = ", ".join(f"{s['name']} ({s['intervention'].get('skill') or s['intervention']['factor']}: {s['outcome']})"
                          for s in explored)
        return {**result, "reason": f"{result['reason']}; explored {len(explored)} untriggered lever(s) from {parent}, "
                                    f"search.explore's {budget}" + (f": {tried}" if tried else "")}
    ctx.phase, ctx.plateau = "explore", result["plateau"]["text"]
    manifests, usage, violation = _consult(ws, agent, ctx, version, parent, parent_recipe, Path(worktree), before,
                                           usage=usage, attempts=1)
    if manifests:
        return {"status": "proposed", "manifests": manifests, "usage": usage, "agent": agent.name, "violation": violation}
    return {**result, "usage": usage, "reason": f"{result['reason']}; no untried lever is left to explore"}


def _consult(ws, agent, ctx, version: str, parent: str, parent_recipe: dict, worktree: Path, before,
             *, usage: dict | None = None, attempts: int = 2) -> tuple[list[dict], dict, str | None]:
    """Ask the agent (again after a harness revision, up to `attempts` calls): (manifests, usage, violation).

    What an untrusted agent changed outside its worktree (`before`: the tamper snapshot, None for the
    heuristic) is put back and rejects the candidate; what it changed inside is checked by the guard.
    """
    from evo.agent import zero_usage

    manifests, usage = [], usage or zero_usage()
    recipe_before = parent_recipe
    seen: dict[str, str] = {}  # path -> content digest after the previous proposal
    violation = None
    for attempt in range(attempts):
        ws.say(f"agent ({agent.name}): {ctx.phase}")
        proposal = agent.propose(ctx)
        if before is not None:
            outside, main_paths = tamper.changes(ws.lineage, ws.root, ws.settings, before)
            if outside:
                ws.lineage.restore_main_paths(main_paths)
                if proposal is not None:
                    manifests.append(proposal.manifest)
                elif not manifests:
                    manifests.append(_tampering_manifest(outside))
                violation = "candidate rejected: the agent changed what lies outside its worktree: " + "; ".join(outside)
                break
        if proposal is None:
            break
        for key in usage:
            usage[key] += proposal.usage.get(key, 0) or 0
        loop_only = [k for k in LOOP_ONLY_FIELDS if k in proposal.manifest]
        if loop_only:
            manifests.append(proposal.manifest)
            violation = (f"candidate rejected: the manifest sets {', '.join(loop_only)}, which only the loop sets "
                         "(a change measured again); leave it out")
            break
        # Only what this proposal changed: paths whose content moved since the previous one.
        changed = [p for p in ws.lineage.worktree_changes(version)
                   if _digest(worktree / p) != seen.get(p)]
        recipe_text = (worktree / "recipe.yaml").read_text()
        if attempt == 1 and not changed and proposal.manifest.get("kind") != "continue":
            break  # asked again after its harness revision, the agent changed nothing more: it proposes nothing
        manifests.append(proposal.manifest)
        violation = _guard_violation(changed, proposal.manifest, recipe_before, recipe_text, ws.settings)
        if violation:
            break
        seen.update({p: _digest(worktree / p) for p in changed})
        if proposal.manifest.get("kind") != "harness" or attempt == attempts - 1:
            break
        # A harness revision: re-diagnose the parent with the revised harness, then ask again.
        recipe_before = parse_recipe(recipe_text)
        rediag = ws.diagnose_parent(parent, parent_recipe, tree=worktree,
                                    out_dir=artifact_dir(ws.root, ws.settings, version) / "rediagnosis")
        ctx.diagnosis, ctx.harness_revised, ctx.phase = rediag, True, "propose"
    return manifests, usage, violation


def _human_proposal(ws, version: str, parent: str, parent_recipe: dict, worktree: Path, human: dict) -> dict:
    """A person's commits on main, taken as this step's candidate: judged like any agent's, same guard.

    The files the commits changed are copied from main into the version's
    worktree; the manifest says whose change it is and quotes the commits.
    """
    from evo.agent import zero_usage
    from evo.agent.manifest import normalize_manifest
    from evo.agent.recipe_diff import common_factor, format_change, leaf_diff

    _place(worktree, {rel: ws.lineage.main_file(rel) for rel in human["paths"]})
    changed = ws.lineage.worktree_changes(version)
    recipe_text = (worktree / "recipe.yaml").read_text()
    violation, diff = None, {}
    try:
        diff = leaf_diff(parent_recipe, parse_recipe(recipe_text, source="recipe.yaml on main"))
    except Exception as exc:  # noqa: BLE001 - an invalid edit is the guard's to word
        violation = f"candidate rejected: your edit's recipe is invalid: {exc}"
    files = [p for p in changed if p != "recipe.yaml" and not p.startswith(("memory/", "skills/"))]
    if diff:
        factor = common_factor(list(diff)) or sorted(diff)[0]  # two factors: the guard names the second
        kind = "harness" if factor.startswith("eval.") else "policy"
        change = format_change(diff)
    else:
        factor = files[0] if len(files) == 1 else (files[0].split("/")[0] if files else "recipe.yaml")
        kind, change = "harness", f"edited {', '.join(files) or 'nothing'}"
    commits = "; ".join(f"{sha[:12]} {subject!r}" for sha, subject in human["commits"])
    manifest = normalize_manifest({
        "kind": kind, "factor": factor, "change": change,
        "hypothesis": f"A person's edit on main since {parent}'s promotion ({commits}).",
        "evidence": {"findings": [], "metrics": {}},
        "predicted_effect": "as its author intends; judged against the counterfactual control like any candidate",
        "expected_cost": "the parent's training budget under the edited recipe",
    }, source="your edit on main")
    if violation is None:
        violation = _guard_violation(changed, manifest, parent_recipe, recipe_text, ws.settings)
    return {"status": "proposed", "manifests": [manifest], "usage": zero_usage(), "agent": "human",
            "violation": violation}


LOOP_ONLY_FIELDS = ("remeasures", "seed_start")  # `_remeasure` sets them; an agent's manifest may not
MAX_MEASURE_SEEDS = load_schema("manifest")["properties"]["seeds"]["maximum"]  # written once, in the schema


def _remeasure(ws, version: str, parent: str, parent_recipe: dict, records: dict, last: dict | None,
               worktree: Path) -> dict | None:
    """The last candidate from `parent` measured again under fresh seeds, when that could settle it; else None.

    Its verdict against the control was `insufficient` with a gain that the
    task-sampling interval alone resolves (`boot_ci_low > 0`): what made it
    inconclusive is the training-seed term. Moving on would drop a lever for
    seed luck (calc: explorations +0.049 and +0.076 against a one-seed floor of
    ±0.23, both left). Under `stats.PAIRED_MIN_SEEDS` common seeds the judge
    reads that term from the seed-matched differences themselves
    (`evo.harness.stats.paired_seed_noise`); a candidate that already had them
    gets twice its seeds. The seeds are fresh (manifest `seed_start`, past the
    earlier verdict's): the seed whose luck made it worth measuring again is
    not judged again, or the re-measure would be biased towards the gain that
    selected it. Control runs already trained under those seeds (a continuation
    measured under more seeds) are reused. Once per change: a re-measure is not
    measured again, nor proposed twice (a rejected or pruned one included).
    """
    from evo.agent import zero_usage
    from evo.agent.manifest import normalize_manifest
    from evo.errors import VersionError
    from evo.harness.stats import PAIRED_MIN_SEEDS

    if not last or last.get("outcome") != "insufficient" or last.get("vetoes"):
        return None
    name = last["version"]
    created = records[name].last("created") or {}
    manifest = created.get("intervention")
    headline = last.get("headline") or {}
    if (records[name].parents[:1] != [parent] or not isinstance(manifest, dict) or manifest.get("kind") != "policy"
            or manifest.get("remeasures") or (last.get("attributed") or {}).get("against") != "control"
            or not (headline.get("delta") or 0) > 0 or not (headline.get("boot_ci_low") or 0) > 0):
        return None
    if any(((rec.last("created") or {}).get("intervention") or {}).get("remeasures") == name
           for rec in records.values() if rec.name != version):
        return None  # proposed once already (judged, rejected by the guard or at the gate)
    seeds = int(last.get("seeds") or 1)
    target = min(MAX_MEASURE_SEEDS, max(PAIRED_MIN_SEEDS, 2 * seeds))
    if target <= seeds:
        return None
    def text_at(rel: str) -> str | None:
        try:
            return ws.lineage.file_at(name, rel)
        except VersionError:  # the change deleted it
            return None

    _place(worktree, {rel: text_at(rel) for rel in ws.lineage.changed_paths(name)})
    interval = f"Δ {headline['delta']:+.4f} [{headline['ci_low']:+.4f}, {headline['ci_high']:+.4f}]"
    again = normalize_manifest({
        **{k: v for k, v in manifest.items() if k not in ("seeds", "steps", "backtest")},  # its backtest was run
        "seeds": target, "seed_start": seeds, "remeasures": name,
        "hypothesis": (f"Measured again: {name}'s change gave {interval} against the control under {seeds} seed(s), "
                       f"insufficient, though its task-sampling interval alone [{headline['boot_ci_low']:+.4f}, "
                       f"{headline['boot_ci_high']:+.4f}] excludes 0: the training-seed term decides. Under {target} "
                       f"fresh seeds the judge reads that term from the seed-matched differences. {name}'s hypothesis: "
                       f"{manifest.get('hypothesis', '')}"),
    }, source="loop manifest")
    violation = _guard_violation(ws.lineage.worktree_changes(version), again, parent_recipe,
                                 (worktree / "recipe.yaml").read_text(), ws.settings)
    return {"status": "proposed", "manifests": [again], "usage": zero_usage(), "agent": "loop", "violation": violation}


def _place(worktree: Path, files: dict[str, str | None]) -> None:
    """Write each file's text into the version's worktree (None: remove it): a candidate the loop copies in."""
    for rel, text in files.items():
        target = worktree / rel
        if text is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")


def _guard_violation(changed: list[str], manifest: dict, parent_recipe: dict, recipe_text: str,
                     settings: dict) -> str | None:
    """What `evo.agent.guard.check_candidate` rejects in a candidate (None: it passes)."""
    from evo.agent.guard import check_candidate

    try:
        check_candidate(changed, manifest, parent_recipe, recipe_text, settings)
    except AgentError as exc:
        return str(exc)
    return None


def _plateau_or_measure(ws, version: str, parent: str, parent_recipe: dict, records: dict, diagnosis: dict,
                        usage: dict) -> dict:
    """The agent proposes nothing: stop only on a measured plateau (or a collapsed parent), else measure one.

    What continuing the parent's own recipe gave (its control, or a
    continue-training child) decides. A plateau is measured when its interval
    lies below what one version's verdict can resolve (`ci_high` <= the
    half-width a one-seed interval has: the task-sampling term and one seed's
    noise floor; an equivalence test, so a wide interval around a small gain is
    not read as "no gain") and the continuation's own training reward is flat
    within its noise (slope t below 2; the parent's curve before any continuation
    was measured). Until then the loop measures again, with more power:

    - the gain is positive or the reward still rising: the same recipe for twice
      as many steps (the longer control starts from the shorter one where the
      schedule allows, `evo.train.run.extend_run`, so those steps are the ones a
      kept continuation keeps), up to as many steps as the policy has behind it;
    - otherwise: the same continuation under one more seed (the pooled runs
      narrow the interval), up to the schema's seed limit, where the loop stops
      and says the plateau was not established.
    """
    veto = V.collapse_veto(records, parent)
    if veto is not None:  # a dead group carries no gradient: more of the same steps cannot be measured learning
        return {"status": "nothing", "reason": f"{parent}'s policy collapsed ({veto.get('message', 'collapse veto')}) and no "
                                               "lever's trigger fires on its diagnosis; continuing it measures nothing: "
                                               "change the recipe (see its diagnosis)"}
    measured = V.continuations(records, parent)
    slope_t = _reward_slope_t(ws, measured[-1] if measured else None, diagnosis)
    rising = slope_t is not None and slope_t >= 2
    curve = ("" if slope_t is None else
             f"; training reward slope t = {slope_t:.1f} ({'still rising' if rising else 'flat within its noise' if abs(slope_t) < 2 else 'falling'})")
    steps = int(parent_recipe["grpo"]["steps"])
    if not measured:
        return _continue(parent, steps, steps, 1, usage, slope_t,
                         "No lever's trigger fires and no continuation of this version has been measured: "
                         f"train its recipe further to measure whether the policy is still learning{curve}.")
    last = measured[-1]
    seeds, length = int(last.get("seeds") or 1), int(last.get("steps") or steps)
    # What one version's verdict resolves: one seed's floor against the fixed parent (the recorded floor is the
    # pooled seeds'), with the task-sampling half-width of this evaluation, combined as the judge widens.
    boot = (last["boot_ci_high"] - last["delta"]) if last.get("boot_ci_high") is not None else 0.0
    margin = float(np.hypot((last.get("noise_floor") or 0.0) * seeds ** 0.5, boot))
    floor = f", noise floor ±{last['noise_floor']:.4f}" if last.get("noise_floor") else ""
    text = (f"continuing {parent}'s recipe for {length} steps ({last['via']}, {seeds} seed(s)) gave Δ {last['delta']:+.4f} "
            f"[{last['ci_low']:+.4f}, {last['ci_high']:+.4f}]{floor}: {last['outcome']}{curve}")
    if last["outcome"] == "improvement":
        if str(last["via"]).startswith("control "):
            # A control that beat its parent is a gain more training alone gives: keep it as a version (its run is
            # reused, nothing is trained again) rather than stop with it on the table.
            return _continue(parent, steps, length, seeds, usage, slope_t,
                             f"Still learning: {text}. Keep that continuation as a version.")
        return {"status": "nothing", "plateau": {"text": text, "continuation": last, "reward_slope_t": slope_t},
                "reason": f"the last continuation improved ({text}; kept as {last['via']}) and no further intervention applies"}
    settled = last["ci_high"] is not None and last["ci_high"] <= margin
    if settled and not rising:
        return {"status": "nothing", "reason": f"plateau measured: {text}; the interval lies below what one version's verdict resolves "
                                               f"(±{margin:.4f})",
                "plateau": {"text": text, "continuation": last, "reward_slope_t": slope_t, "margin": margin}}
    wide = f"the interval still allows a gain beyond what one version's verdict resolves (±{margin:.4f})" if not settled else "the reward still rises"
    behind = max(V.schedule_end(records, parent), steps)
    if (rising or (last["delta"] or 0) > 0) and 2 * length <= behind:
        return _continue(parent, steps, 2 * length, 1, usage, slope_t,
                         f"Inconclusive, not a plateau: {text}; {wide}. The gain points up: measure the same recipe "
                         f"for {2 * length} steps, where a policy still learning gains more.")
    if seeds + 1 <= MAX_MEASURE_SEEDS:
        return _continue(parent, steps, length, seeds + 1, usage, slope_t,
                         f"Inconclusive, not a plateau: {text}; {wide}. Measure the same continuation again under "
                         f"{seeds + 1} seeds; the pooled runs narrow the interval.")
    return {"status": "nothing", "reason": f"measuring limit reached, plateau not established: {text}; {wide}, "
                                           f"after {seeds} seeds",
            "plateau": {"text": text, "continuation": last, "reward_slope_t": slope_t, "margin": margin}}


def _reward_slope_t(ws, last: dict | None, diagnosis: dict):
    """The training reward's slope t of the last measured continuation's own run (its diagnosis), else of the
    parent's run: the parent's curve stays what it was however often the continuation is measured."""
    run_diag = None
    if ws is not None and last and last.get("run"):
        path = artifact_root(ws.root, ws.settings) / last["run"] / "diagnosis.json"
        run_diag = json.loads(path.read_text()) if path.is_file() else None
    return ((run_diag or diagnosis).get("metrics") or {}).get("signal/reward_slope_t")


def _continue(parent: str, steps: int, length: int, seeds: int, usage: dict, slope_t, hypothesis: str) -> dict:
    """The loop's own continue-training proposal: `parent`'s recipe (of `steps` steps a version) for `length`
    more steps under `seeds` seeds."""
    from evo.agent.manifest import normalize_manifest

    manifest = {
        "kind": "continue", "factor": "continue",
        "change": f"continue {parent}'s recipe for {length} more steps" + (f" under {seeds} seeds" if seeds > 1 else ""),
        "hypothesis": hypothesis,
        "evidence": {"findings": [], "metrics": {} if slope_t is None else {"signal/reward_slope_t": slope_t}},
        "predicted_effect": "score/avg_at_k rises beyond the noise floor while the policy is still learning; "
                            "otherwise the plateau is measured and the loop stops",
        "expected_cost": f"{length} training steps of the parent's recipe per seed not yet trained "
                         "(less the steps of a shorter continuation it extends)", "skill": None,
    }
    if seeds > 1:
        manifest["seeds"] = seeds
    if length != steps:
        manifest["steps"] = length
    return {"status": "proposed", "manifests": [normalize_manifest(manifest, source="loop manifest")],
            "usage": usage, "agent": "loop", "violation": None}


def commit(ws, version: str, parent: str, proposal: dict) -> dict:
    manifests = proposal["manifests"]
    primary = manifests[-1]
    message = f"{version}: {describe(primary)}\n\n{primary.get('hypothesis', '')}".strip()
    sha = ws.lineage.commit_version(version, message, intervention=primary.get("factor"))
    fault_point("commit", "mid")  # committed, no event yet: resume must not commit twice
    ws.lineage.append_event(version, {
        "id": event_id(version, "created"), "event": "created", "version": version,
        "parents": [parent], "branch": f"evo/{version}", "commit": sha,
        "intervention": primary, "harness_revision": manifests[0] if len(manifests) > 1 else None,
        "agent": proposal["agent"], "usage": proposal["usage"],
    })
    for m in manifests:
        if m.get("skill"):
            ws.lineage.append_event(version, {
                "id": event_id(version, "skill_used", m["skill"]), "event": "skill_used",
                "version": version, "skill": m["skill"], "domain": ws.settings["domain"],
            })
    if proposal.get("violation"):
        ws.lineage.append_event(version, {
            "id": event_id(version, "rejected"), "event": "rejected", "version": version,
            "reason": proposal["violation"], "by": "guard",
        })
    return {"commit": sha}


def backtest(ws, version: str, parent: str, parent_recipe: dict, manifests: list[dict]) -> dict | None:
    change = next((m["backtest"] for m in manifests if m.get("backtest")), None)
    if not change:
        return None
    from evo.harness.backtest import backtest

    result = backtest(artifact_dir(ws.root, ws.settings, parent), change, parent_recipe)
    ws.lineage.append_event(version, {
        "id": event_id(version, "backtested"), "event": "backtested", "version": version,
        "change": change, "prediction": {k: v for k, v in result.items() if k != "message"},
        "message": result.get("message", ""),
    })
    return result


def _tampering_manifest(outside: list[str]) -> dict:
    """What is recorded for an agent that proposed nothing but changed the workspace: the attempt itself."""
    from evo.agent.manifest import normalize_manifest

    return normalize_manifest({
        "kind": "harness", "factor": "workspace", "change": "changed files outside its worktree",
        "hypothesis": "(none: the agent wrote outside its worktree) " + "; ".join(outside)[:500],
        "evidence": {"findings": [], "metrics": {}}, "predicted_effect": "none", "expected_cost": "none",
    }, source="loop manifest")


def _digest(path: Path) -> str:
    """Content digest of a worktree file ("" when deleted)."""
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


