"""`evo step`: one journaled version transition.

    observe -> diagnose -> propose (reflect | intervene) -> commit -> backtest
    -> gate -> control -> run -> evaluate -> judge -> decide -> record

A workspace whose baseline v0 has never been trained first bootstraps it
(gate -> run -> replicates -> evaluate -> judge against the untrained base
model): the replicates are v0's recipe trained again under other seeds, which
measure the noise floor every later verdict is read against.

`control` trains (or reuses) the counterfactual the candidate is judged
against: the parent's own recipe continued under the same schedule
(`evo.loop.runs`); `judge` records the candidate's effect against it and its
progress against the parent (`evo.loop.judge`).

Every phase is journaled (`evo.loop.journal`); every side effect is
idempotent, so a step killed at any point resumes with the next `evo step`
and never writes a version, a note event or an artifact twice. The
orchestrator, never the agent, runs git and writes notes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from evo.errors import VersionError, WorkspaceError
from evo.loop import gate as gating
from evo.loop import runs as R
from evo.loop import versions as V
from evo.loop.decide import decide
from evo.loop.journal import Journal, fault_point
from evo.loop.propose import ProposalPhases
from evo.loop.report import StepReport
from evo.loop.runs import Plan
from evo.resources import resource_dir
from evo.settings import artifact_dir, artifact_root, load_settings
from evo.vocabulary import Action, event_id


class StepRunner(ProposalPhases):
    """Runs (or resumes) one step in workspace `root`."""

    def __init__(self, root: Path, *, agent_backend: str | None = None, dry_run: bool = False,
                 say: Callable[[str], None] | None = None, progress: bool = False):
        self.root = Path(root).resolve()
        self.agent_backend = agent_backend
        self.dry_run = dry_run
        self.say = say or (lambda _msg: None)
        self.progress = progress

    # ------------------------------------------------------------------ entry
    def run(self) -> StepReport:
        from evo.lineage import Lineage
        from evo.lineage.lock import workspace_lock

        self.lineage = Lineage.open(self.root)
        self.settings = load_settings(self.root)
        with workspace_lock(self.root, "evo step" + (" --dry-run" if self.dry_run else "")):
            journal = Journal.load(self.root)
            if journal is not None and self.dry_run:  # a dry run never resumes (that would write)
                return StepReport(status="dry-run", version=journal.version, parents=list(journal.parents),
                                  message=f"a step is in flight ({journal.version} at phase {journal.data['phase']}); "
                                          "`evo step` resumes it; nothing was changed")
            bootstrapped = None
            if journal is not None and journal.data.get("bootstrap"):
                self.say(f"resuming the bootstrap of {journal.version} at phase {journal.data['phase']}")
                bootstrapped = self._bootstrap(journal.version, journal)
                if bootstrapped["status"] != "done":
                    return self._waiting_report(journal.version, bootstrapped)
                journal = None
            if journal is None:
                records = self.lineage.read_all()
                if not self.dry_run:
                    gating.check_budgets(records, self.settings)
                self.lineage.require_clean_main("`evo step`")
                from evo.lineage.fsck import require_consistent

                human = self.lineage.main_edits(records)  # a person's commits on main: this step's candidate
                require_consistent(self.root, self.settings, ignore=("main-edited",) if human else ())
                head = V.promoted_head(records)
                if not V.is_evaluated(self.root, self.settings, head):
                    if records[head].last("evaluated") is not None:
                        raise WorkspaceError(
                            f"{head} was trained and evaluated but its artifacts are missing "
                            f"({artifact_dir(self.root, self.settings, head)}); restore them (see `evo fsck`) "
                            "instead of training it again")
                    if self.dry_run:
                        return self._dry_run_untrained(head)
                    bootstrapped = self._bootstrap(head)
                    if bootstrapped["status"] != "done":
                        return self._waiting_report(head, bootstrapped)
                if self.dry_run:
                    return self._dry_run(head, human)
                journal = Journal.start(self.root, self.lineage.next_version(), [head])
                if human:
                    journal.data["human"] = human
                    journal.save()
                self.say(f"step {journal.version} from {head}" + (" (your edit on main)" if human else ""))
            else:
                self.say(f"resuming {journal.version} at phase {journal.data['phase']}")
            report = self._transition(journal)
            report.bootstrapped = bootstrapped
            return report

    def calibrate(self, runs: int) -> dict:
        """Measure (or widen) the noise floor: v0's recipe trained from the base model under `runs` seeds in all.

        The bootstrap does this with `search.calibration_seeds`; this adds the
        runs a workspace lacks (e.g. one created before calibration existed).
        Returns the pooled seed noise and the runs behind it.
        """
        from evo.lineage import Lineage
        from evo.lineage.lock import workspace_lock

        self.lineage = Lineage.open(self.root)
        self.settings = load_settings(self.root)
        with workspace_lock(self.root, "evo calibrate"):
            if Journal.load(self.root) is not None:
                raise WorkspaceError("a step is in flight; finish it with `evo step` before calibrating")
            records = self.lineage.read_all()
            base = "v0"
            if records.get(base) is None or records[base].last("evaluated") is None:
                raise WorkspaceError("v0 has not been trained yet; run `evo step` (its bootstrap calibrates)")
            recipe = V.recipe_of(self.lineage, base)
            have = sorted(R.replicate_events(records[base]))
            own = int(records[base].last("trained").get("seed", recipe["seed"]))
            seeds = [own] + have
            extra, candidate = [], max(seeds) + 1
            while len(seeds) + len(extra) < runs:
                extra.append(candidate)
                candidate += 1
            self._replicates(base, Plan("bootstrap", recipe, [own], calibration=extra), None)
            records = self.lineage.read_all()
            noise = R.workspace_noise(records)
            return {"version": base, "seeds": [own] + sorted(R.replicate_events(records[base])), "trained": extra,
                    "noise": noise.to_dict() if noise else None,
                    "noise_floor_one_seed": noise.floor(1, 1) if noise else None}

    def _waiting_report(self, version: str, result: dict) -> StepReport:
        return StepReport(status="awaiting-approval", version=version, estimate=result.get("estimate", {}),
                          message=f"run `evo approve {version}` (or `evo reject {version}`), then `evo step`")

    # ------------------------------------------------------------- bootstrap
    def _bootstrap(self, version: str, journal: Journal | None = None) -> dict:
        """Train the baseline v0, measure the noise floor, judge it against the untrained base model."""
        if journal is None:
            journal = Journal.start(self.root, version, [])
            journal.data["bootstrap"] = True
            journal.save()
        self.say(f"bootstrap: training baseline {version}")
        recipe = V.recipe_of(self.lineage, version)
        base_dir = artifact_dir(self.root, self.settings, V.BASE)
        if not journal.is_done("evaluate-base"):
            journal.begin("evaluate-base")
            from evo.train.evaluate import evaluate

            self.say(f"evaluate base model {recipe['model']['name']}")
            evaluate(recipe["model"]["name"], recipe, base_dir)
            journal.complete("evaluate-base")
        seeds = R.seeds_for(recipe, self.settings)
        extra = int(self.settings["search"]["calibration_seeds"]) - len(seeds)
        plan = Plan("bootstrap", recipe, seeds, calibration=[seeds[-1] + 1 + i for i in range(max(0, extra))])
        result = self._gate_run_judge(journal, version, plan, parent=None)
        if result.get("status") == "done":
            journal.finish()
        return result

    # ------------------------------------------------------------ transition
    def _transition(self, journal: Journal) -> StepReport:
        version, parent = journal.version, journal.parents[0]
        report = StepReport(status="done", version=version, parents=list(journal.parents))
        parent_recipe = V.recipe_of(self.lineage, parent)
        if not journal.is_done("observe"):
            journal.complete("observe", {"parent": parent})

        diag = self._phase(journal, "diagnose", lambda: self._diagnosis_ref(parent, parent_recipe))

        human = journal.data.get("human")
        proposal = self._phase(journal, "propose", lambda: self._propose(version, parent, parent_recipe, diag, human))
        if proposal["status"] == "nothing":
            self.lineage.discard_version(version)
            journal.abandon()
            report.status = "nothing-to-do"
            report.message = proposal["reason"]
            report.plateau = proposal.get("plateau")
            return report
        manifests = proposal["manifests"]
        primary = manifests[-1]
        kind = report.describe_proposal(manifests)

        self._phase(journal, "commit", lambda: self._commit(version, parent, proposal))
        if proposal.get("violation"):
            self._apply_decision(version, "prune", f"candidate rejected: {proposal['violation']}", [])
            self._record(journal, version, None)
            report.status, report.decision, report.reason = "rejected", "pruned", proposal["violation"]
            journal.finish()
            return report

        recipe = V.recipe_of(self.lineage, version)
        bt = self._phase(journal, "backtest", lambda: self._backtest(version, parent, parent_recipe, manifests))
        report.backtest = bt.get("message", "") if bt else ""

        control = self.settings["search"]["control"] == "continue"
        plan = Plan(kind, recipe, R.seeds_for(recipe, self.settings), control=control and kind == "policy",
                    control_steps=R.control_steps(parent_recipe, recipe, primary.get("factor")))
        result = self._gate_run_judge(journal, version, plan, parent=parent, parent_recipe=parent_recipe)
        report.estimate = result.get("estimate", {})
        if result.get("status") == "awaiting-approval":
            report.status = "awaiting-approval"
            report.message = f"run `evo approve {version}` (or `evo reject {version}`), then `evo step`"
            return report
        judged = result["judged"]
        report.take_verdict(judged)

        dec = self._phase(journal, "decide", lambda: self._decide(version, judged, kind == "harness"))
        report.decision, report.reason = dec["action"], dec["reason"]
        self._phase(journal, "record", lambda: self._record(journal, version, primary, outcome=judged["outcome"]))
        journal.finish()
        self.lineage.remove_worktree(version)
        return report

    def _phase(self, journal: Journal, name: str, fn: Callable[[], object]):
        if journal.is_done(name):
            return journal.result(name)
        journal.begin(name)
        self.say(name)
        result = fn()
        journal.complete(name, result)
        return result

    # --------------------------------------------------------------- diagnosis
    def _diagnose(self, version: str, recipe: dict, *, out_dir: Path, tree: Path | None = None,
                  run_dir: Path | None = None) -> dict:
        """Diagnose `version`'s run (or `run_dir`) with the analyzers in `tree` (built-ins first)."""
        from evo.harness.diagnose import diagnose

        inputs = V.diagnosis_inputs(self.lineage, self.lineage.read_all(), self.root, self.settings, version, tree=tree)
        tree = inputs.pop("tree")
        return diagnose(run_dir or artifact_dir(self.root, self.settings, version), recipe=recipe,
                        settings=self.settings, analyzer_dirs=[resource_dir("analyzers"), tree / "analyzers"],
                        version=version, out_dir=out_dir, **inputs)

    def _diagnose_parent(self, parent: str, recipe: dict, *, tree: Path | None = None,
                         out_dir: Path | None = None) -> dict:
        """Diagnose `parent` with the harness in `tree` (main's by default); returns the diagnosis."""
        out = out_dir or artifact_dir(self.root, self.settings, parent)
        return self._diagnose(parent, recipe, tree=tree or self.root, out_dir=out)

    def _diagnosis_ref(self, parent: str, recipe: dict) -> dict:
        """Diagnose the parent; the journal keeps where the diagnosis is, not the diagnosis."""
        diag = self._diagnose_parent(parent, recipe)
        path = artifact_dir(self.root, self.settings, parent) / "diagnosis.json"
        return {"path": str(path), "harness_version": diag.get("harness_version")}

    # --------------------------------------------------------------- gate .. judge
    def _gate_run_judge(self, journal: Journal, version: str, plan: Plan, *, parent: str | None,
                        parent_recipe: dict | None = None) -> dict:
        estimate = self._estimate(plan, parent, parent_recipe).as_dict()
        if not journal.is_done("gate"):
            if not self._gate(journal, version, estimate):
                return {"status": "awaiting-approval", "estimate": estimate}
        if plan.control or plan.kind == "continue":
            self._phase(journal, "control", lambda: self._control(version, plan, parent, parent_recipe))
        ran = self._phase(journal, "run", lambda: self._run(version, plan, parent, parent_recipe))
        if plan.kind == "bootstrap":
            self._phase(journal, "replicates", lambda: self._replicates(version, plan, None))
        self._phase(journal, "evaluate", lambda: self._evaluate(version, plan, ran))
        judged = self._phase(journal, "judge", lambda: self._judge(version, plan, parent, parent_recipe))
        return {"status": "done", "estimate": estimate, "judged": judged}

    def _estimate(self, plan: Plan, parent: str | None, parent_recipe: dict | None) -> gating.CostEstimate:
        """Every run this step trains: the version under each seed, the missing control runs, calibration."""
        runs = []
        if plan.trains:
            runs += [plan.recipe] * (len(plan.seeds) + len(plan.calibration))
        if plan.control or plan.kind == "continue":
            have = R.control_events(self.lineage.read_all().get(parent))
            runs += [R.control_recipe(parent_recipe, plan.control_steps, s) for s in plan.seeds
                     if R.control_key(plan.control_steps, s) not in have]
        return gating.estimate_runs(runs, self.settings, eval_recipe=plan.recipe if not plan.trains else None)

    def _gate(self, journal: Journal, version: str, estimate: dict) -> bool:
        journal.begin("gate")
        events = [e.get("event") for e in self.lineage.events(version)]
        threshold = float(self.settings["gate"]["approval_above_gpu_hours"])
        approved = estimate["gpu_hours"] <= threshold or "approved" in events
        status = "approved" if approved else "awaiting-approval"
        self.lineage.append_event(version, {
            "id": event_id(version, "gated", status), "event": "gated", "version": version,
            "estimate": estimate, "threshold": threshold, "status": status,
        })
        if not approved:
            self.say(f"{version} awaits approval: estimated {estimate['gpu_hours']:.3f} GPU-h > {threshold:g}")
            return False
        journal.complete("gate", {"estimate": estimate, "status": status})
        return True

    def _train(self, recipe: dict, out: Path, init, version: str, parent: str | None) -> dict:
        """One training run, on `run.nproc` data-parallel processes when evo.yaml says so (resumable either way).

        From a parent's checkpoint the run continues the parent's prompt schedule
        (`V.schedule_end`): more steps see new prompts, as a longer run would.
        """
        from evo.train.launch import run_training

        run = self.settings["run"]
        offset = V.schedule_end(self.lineage.read_all(), parent) if parent else 0
        res = run_training(recipe, out, init_checkpoint=init, version=version, progress=self.progress,
                           nproc=int(run["nproc"]), launcher=run["launcher"], step_offset=offset)
        return res.summary

    def _control(self, version: str, plan: Plan, parent: str, parent_recipe: dict) -> dict:
        """Train (or reuse) the parent's continuation under this candidate's schedule, one run per seed."""
        from evo.loop.judge import continuation_of

        steps = plan.control_steps
        init = V.checkpoint_of(self.root, self.settings, parent)
        reused, trained = [], []
        for seed in plan.seeds:
            key = R.control_key(steps, seed)
            if key in R.control_events(self.lineage.record(parent)):
                reused.append(key)
                continue
            out = R.control_dir(self.root, self.settings, parent, key)
            recipe = R.control_recipe(parent_recipe, steps, seed)
            self.say(f"control: {parent}'s recipe continued for {steps} steps (seed {seed})")
            summary = self._train(recipe, out, init, f"{parent}~{key}", parent)
            fault_point("control", "mid")  # trained, not yet recorded: resume must reuse the run
            self._diagnose(parent, parent_recipe, out_dir=out, run_dir=out)
            runs = [R.control_dir(self.root, self.settings, parent, R.control_key(steps, s))
                    for s in plan.seeds if s <= seed]
            continuation = continuation_of(artifact_dir(self.root, self.settings, parent), runs,
                                           noise=R.workspace_noise(self.lineage.read_all()),
                                           B=int(self.settings["search"]["bootstrap_samples"]))
            ev = R.eval_summary(out)
            self.lineage.append_event(parent, {
                "id": event_id(parent, "control", key), "event": "control", "version": parent, "key": key,
                "steps": steps, "seed": seed, "for": version, "run": str(out.relative_to(artifact_root(self.root, self.settings))),
                "artifacts": R.artifact_list(out), "avg_at_k": ev["avg_at_k"],
                "per_stratum": ev.get("per_stratum", {}), "continuation": continuation,
                "estimate": gating.estimate(recipe, self.settings).as_dict(), "grpo_steps": steps,
                "metrics": summary.get("final", {}),
            })
            trained.append(key)
        return {"reused": reused, "trained": trained}

    def _run(self, version: str, plan: Plan, parent: str | None, parent_recipe: dict | None = None) -> dict:
        out = artifact_dir(self.root, self.settings, version)
        if plan.kind == "harness":
            V.write_link(self.root, self.settings, version, parent)
            return {"checkpoint": V.checkpoint_of(self.root, self.settings, parent), "trained": False}
        if plan.kind == "continue":  # the continuation is the control's run: reuse it, train nothing
            steps = plan.control_steps
            sources = [R.control_dir(self.root, self.settings, parent, R.control_key(steps, s)) for s in plan.seeds]
            targets = [out] + [R.replicate_dir(self.root, self.settings, version, s) for s in plan.seeds[1:]]
            for source, target in zip(sources, targets):
                R.clone_run(source, target)
                if plan.recipe["eval"] != parent_recipe["eval"]:  # a harness revision changed the measurement
                    from evo.train.evaluate import evaluate

                    evaluate(target / "checkpoint", plan.recipe, target)
            summary = json.loads((out / "summary.json").read_text())
            from_control = R.control_key(steps, plan.seeds[0])
        else:
            init = None if parent is None else V.checkpoint_of(self.root, self.settings, parent)
            summary = self._train(R.with_seed(plan.recipe, plan.seeds[0]), out, init, version, parent)
            from_control = None
        trained = {
            "id": event_id(version, "trained"), "event": "trained", "version": version,
            "artifacts": R.artifact_list(out), "metrics": summary.get("final", {}), "seed": plan.seeds[0],
            "from_control": from_control,
            "schedule": {"offset": int(summary.get("step_offset") or 0), "steps": int(summary.get("steps") or 0)},
            # what this event trained: nothing for a continuation that reuses its control's run
            "estimate": {} if from_control else gating.estimate(plan.recipe, self.settings).as_dict(),
            "grpo_steps": 0 if from_control else int(plan.recipe["grpo"]["steps"]),
        }
        if parent is None:  # the baseline: the base model's evaluation it is judged against, hashed too
            trained["baseline_artifacts"] = R.artifact_list(artifact_dir(self.root, self.settings, V.BASE))
        self.lineage.append_event(version, trained)
        if plan.kind != "bootstrap":
            self._replicates(version, plan, parent)
        return {"checkpoint": str(out / "checkpoint"), "trained": True}

    def _replicates(self, version: str, plan: Plan, parent: str | None) -> dict:
        """The version's recipe under its other training seeds (and, for v0, the calibration seeds)."""
        done = R.replicate_events(self.lineage.record(version))
        init = None if parent is None else V.checkpoint_of(self.root, self.settings, parent)
        for seed in plan.seeds[1:] + plan.calibration:
            if seed in done:
                continue
            out = R.replicate_dir(self.root, self.settings, version, seed)
            recipe = R.with_seed(plan.recipe, seed)
            if plan.kind != "continue":
                self.say(f"replicate: {version} under seed {seed}")
                self._train(recipe, out, init, version, parent)
            ev = R.eval_summary(out)
            self.lineage.append_event(version, {
                "id": event_id(version, "replicated", f"seed-{seed}"), "event": "replicated", "version": version,
                "seed": seed, "run": str(out.relative_to(artifact_root(self.root, self.settings))),
                "artifacts": R.artifact_list(out), "avg_at_k": ev["avg_at_k"], "per_stratum": ev.get("per_stratum", {}),
                "estimate": {} if plan.kind == "continue" else gating.estimate(recipe, self.settings).as_dict(),
                "grpo_steps": 0 if plan.kind == "continue" else int(recipe["grpo"]["steps"]),
                "calibration": seed in plan.calibration,
            })
        return {"seeds": plan.seeds[1:] + plan.calibration}

    def _evaluate(self, version: str, plan: Plan, ran: dict) -> dict:
        out = artifact_dir(self.root, self.settings, version)
        ev = R.eval_summary(out) if ran.get("trained") and (out / "eval.json").exists() else None
        if ev is None:  # train_recipe evaluates its final checkpoint; a harness-only version does not train
            from evo.train.evaluate import evaluate

            ev = evaluate(ran["checkpoint"], plan.recipe, out)
        self.lineage.append_event(version, {
            "id": event_id(version, "evaluated"), "event": "evaluated", "version": version,
            "avg_at_k": ev["avg_at_k"], "k": ev["k"], "n_tasks": ev["n_tasks"],
            "per_stratum": ev.get("per_stratum", {}), "artifacts": R.artifact_list(out, names=R.EVAL_FILES),
        })
        return {"avg_at_k": ev["avg_at_k"]}

    def _judge(self, version: str, plan: Plan, parent: str | None, parent_recipe: dict | None) -> dict:
        from evo.loop.judge import judge_runs

        diag = self._diagnose(version, plan.recipe, out_dir=artifact_dir(self.root, self.settings, version))
        records = self.lineage.read_all()
        baseline = parent or V.BASE
        control_runs = None
        key = None
        if plan.control:
            steps = plan.control_steps
            key = R.control_key(steps, plan.seeds[0])
            control_runs = [R.control_dir(self.root, self.settings, parent, R.control_key(steps, s)) for s in plan.seeds]
        confounded = plan.kind == "policy" and not plan.control
        candidate_runs = R.run_dirs(self.root, self.settings, records[version])
        if plan.kind == "bootstrap":
            candidate_runs = candidate_runs[:len(plan.seeds)]  # calibration replicates measure noise, not v0
        baseline_run = artifact_dir(self.root, self.settings, baseline)
        tampered = R.verify_runs(self.root, self.settings, records, candidate_runs + [baseline_run] + (control_runs or []))
        if tampered:  # evidence that no longer matches its recorded sha256 is a veto, whatever it says
            diag.setdefault("audits", {}).setdefault("vetoes", []).extend(
                {"audit": "evidence_integrity", "message": line, "evidence": {}} for line in tampered)
        judged = judge_runs(version, candidate_runs, baseline_run,
                            baseline=baseline, control_runs=control_runs, control_key=key, confounded=confounded,
                            noise=R.workspace_noise(records), diagnosis=diag,
                            B=int(self.settings["search"]["bootstrap_samples"]))
        judged["id"] = event_id(version, "judged")
        self.lineage.append_event(version, {
            "id": event_id(version, "diagnosed"), "event": "diagnosed", "version": version,
            "harness_version": diag.get("harness_version"), "findings": diag["counts"],
            "vetoed": bool(judged["vetoes"]),
        })
        self.lineage.append_event(version, judged)
        return judged

    # --------------------------------------------------------------- decide, record
    def _decide(self, version: str, judged: dict, harness_only: bool) -> dict:
        records = self.lineage.read_all()
        dec = decide(version, judged, harness_only=harness_only,
                     frontier=V.frontier(records, exclude=version), settings=self.settings)
        self._apply_decision(version, dec.action, dec.reason, dec.also_prune)
        return {"action": Action(dec.action).recorded, "reason": dec.reason,
                "also_pruned": [v for v, _ in dec.also_prune]}

    def _apply_decision(self, version: str, action: str, reason: str, also_prune: list) -> None:
        # Checked by event, not state: promote() and prune() finish a transition a kill left half-done.
        record = self.lineage.record(version)
        if action == Action.PROMOTE and record.last("promoted") is None:
            self.lineage.promote(version, reason)
        elif action == Action.PRUNE and record.last("pruned") is None:
            self.lineage.prune(version, reason)
        elif action == Action.KEEP:
            self.lineage.append_event(version, {"id": event_id(version, "kept"), "event": "kept",
                                                "version": version, "reason": reason})
        fault_point("decide", "mid")  # decided in git, not yet in the journal
        for other, why in also_prune:
            if self.lineage.record(other).last("pruned") is None:
                self.lineage.prune(other, why)

    def _record(self, journal: Journal, version: str, manifest: dict | None, outcome: str | None = None) -> dict:
        from evo.agent.memory import update_memory
        from evo.agent.skills import update_skill_evidence

        records = self.lineage.read_all()
        diagnoses = {}
        for name in records:
            path = artifact_dir(self.root, self.settings, name) / "diagnosis.json"
            if path.exists():
                diagnoses[name] = json.loads(path.read_text())
        changed = [Path(p) for p in update_memory(self.root, V.lineage_summaries(records), diagnoses)]
        if manifest and manifest.get("skill") and outcome:
            changed += update_skill_evidence(self.root / "skills", manifest["skill"], version, outcome,
                                             self.settings["domain"])
        paths = {str(p.resolve().relative_to(self.root)) if p.is_absolute() else str(p) for p in changed}
        fault_point("record", "mid")  # memory written, not committed
        # A resumed record finds its files already written (nothing "changed"): commit what is still dirty.
        paths |= {p for p in self.lineage.dirty_paths() if p.startswith(("memory/", "skills/"))}
        human = journal.data.get("human")
        if human and self.lineage.record(version).last("promoted") is None:
            # A person's edit that was not promoted lives on in its version's branch; main is the head's again.
            for rel in human["paths"]:
                try:
                    text = self.lineage.file_at(journal.parents[0], rel)
                except VersionError:
                    (self.root / rel).unlink(missing_ok=True)
                    continue
                (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
                (self.root / rel).write_text(text, encoding="utf-8")
            paths |= set(human["paths"])
        paths = sorted(paths)
        message = f"evo: record {version}" + (f"; your edit on main is kept as {version}, main's files are "
                                               f"{journal.parents[0]}'s again" if human and paths else "")
        sha = self.lineage.commit_main(message, paths) if paths else None
        return {"commit": sha, "paths": paths}
