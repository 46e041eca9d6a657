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

Each phase is a function of its own module, named as in the diagram:
`evo.loop.propose` (propose, commit, backtest), `evo.loop.training` (gate,
control, run, replicates, evaluate), `evo.loop.judge` (judge),
`evo.loop.record` (decide, record); this module only sequences them.

Every phase is journaled (`evo.loop.journal`); every side effect is
idempotent, so a step killed at any point resumes with the next `evo step`
and never writes a version, a note event or an artifact twice. The
orchestrator, never the agent, runs git and writes notes.
"""

from __future__ import annotations

from typing import Callable

from evo.errors import WorkspaceError
from evo.loop import dryrun, propose, record, training
from evo.loop import gate as gating
from evo.loop import runs as R
from evo.loop import versions as V
from evo.loop.context import StepContext
from evo.loop.journal import Journal
from evo.loop.judge import judge
from evo.loop.report import StepReport
from evo.loop.runs import Plan
from evo.settings import artifact_dir


class StepRunner(StepContext):
    """Runs (or resumes) one step in workspace `root`."""

    # ------------------------------------------------------------------ entry
    def run(self) -> StepReport:
        from evo.lineage.lock import workspace_lock

        self.open()
        self._bootstrapped = None
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
                journal, early = self._start()
                if early is not None:
                    return early
            else:
                self.say(f"resuming {journal.version} at phase {journal.data['phase']}")
            report = self._transition(journal)
            report.bootstrapped = bootstrapped or self._bootstrapped
            return report

    def _start(self) -> tuple[Journal | None, StepReport | None]:
        """Checks before a new step (budgets, a clean and consistent workspace), v0's bootstrap, the journal."""
        from evo.lineage.fsck import require_consistent

        records = self.lineage.read_all()
        if not self.dry_run:
            gating.check_budgets(records, self.config.budget)
        self.lineage.require_clean_main("`evo step`")
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
                return None, dryrun.dry_run_untrained(self, head)
            self._bootstrapped = self._bootstrap(head)
            if self._bootstrapped["status"] != "done":
                return None, self._waiting_report(head, self._bootstrapped)
        if self.dry_run:
            return None, dryrun.dry_run(self, head, human)
        journal = Journal.start(self.root, self.lineage.next_version(), [head])
        if human:
            journal.data["human"] = human
            journal.save()
        self.say(f"step {journal.version} from {head}" + (" (your edit on main)" if human else ""))
        return journal, None

    def calibrate(self, runs: int) -> dict:
        """Measure (or widen) the noise floor: v0's recipe trained from the base model under `runs` seeds in all.

        The bootstrap does this with `search.calibration_seeds`; this adds the
        runs a workspace lacks (e.g. one created before calibration existed).
        Returns the pooled seed noise and the runs behind it.
        """
        from evo.lineage.lock import workspace_lock

        self.open()
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
            training.replicates(self, base, Plan("bootstrap", recipe, [own], calibration=extra), None)
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
        if not journal.is_done("evaluate-base"):
            journal.begin("evaluate-base")
            from evo.train.evaluate import evaluate

            self.say(f"evaluate base model {recipe['model']['name']}")
            evaluate(recipe["model"]["name"], recipe, artifact_dir(self.root, self.settings, V.BASE))
            journal.complete("evaluate-base")
        seeds = R.seeds_for(recipe, self.config.search.train_seeds)
        extra = self.config.search.calibration_seeds - len(seeds)
        plan = Plan("bootstrap", recipe, seeds, calibration=[seeds[-1] + 1 + i for i in range(max(0, extra))])
        result = self._gate_run_judge(journal, version, plan, parent=None)
        if result.get("status") == "done":
            journal.finish()
        return result

    # ------------------------------------------------------------ transition
    def _transition(self, journal: Journal) -> StepReport:
        """observe -> diagnose -> propose -> commit -> backtest -> (gate .. judge) -> decide -> record."""
        version, parent = journal.version, journal.parents[0]
        report = StepReport(status="done", version=version, parents=list(journal.parents))
        parent_recipe = V.recipe_of(self.lineage, parent)
        if not journal.is_done("observe"):
            journal.complete("observe", {"parent": parent})

        diag = self._phase(journal, "diagnose", lambda: self.diagnosis_ref(parent, parent_recipe))

        human = journal.data.get("human")
        proposal = self._phase(journal, "propose",
                               lambda: propose.propose(self, version, parent, parent_recipe, diag, human))
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

        self._phase(journal, "commit", lambda: propose.commit(self, version, parent, proposal))
        if proposal.get("violation"):
            record.apply_decision(self, version, "prune", f"candidate rejected: {proposal['violation']}", [])
            record.record(self, journal, version, None)
            report.status, report.decision, report.reason = "rejected", "pruned", proposal["violation"]
            journal.finish()
            return report

        recipe = V.recipe_of(self.lineage, version)
        bt = self._phase(journal, "backtest", lambda: propose.backtest(self, version, parent, parent_recipe, manifests))
        report.backtest = bt.get("message", "") if bt else ""

        control = self.config.search.control == "continue"
        plan = Plan(kind, recipe, R.version_seeds(recipe, primary, self.config.search.train_seeds),
                    control=control and kind == "policy",
                    control_steps=R.control_steps(parent_recipe, recipe, primary),
                    start=training.repair_start(self, parent, recipe) if kind == "policy" else None)
        result = self._gate_run_judge(journal, version, plan, parent=parent, parent_recipe=parent_recipe)
        report.estimate = result.get("estimate", {})
        if result.get("status") == "awaiting-approval":
            report.status = "awaiting-approval"
            report.message = f"run `evo approve {version}` (or `evo reject {version}`), then `evo step`"
            return report
        judged = result["judged"]
        report.take_verdict(judged)

        dec = self._phase(journal, "decide", lambda: record.decide_version(self, version, judged, kind == "harness"))
        report.decision, report.reason = dec["action"], dec["reason"]
        self._phase(journal, "record", lambda: record.record(self, journal, version, primary, outcome=judged["outcome"]))
        journal.finish()
        self.lineage.remove_worktree(version)
        return report

    def _phase(self, journal: Journal, name: str, fn: Callable[[], object]):
        """Run phase `name` once: a resumed step reads its journaled result instead."""
        if journal.is_done(name):
            return journal.result(name)
        journal.begin(name)
        self.say(name)
        result = fn()
        journal.complete(name, result)
        return result

    def _gate_run_judge(self, journal: Journal, version: str, plan: Plan, *, parent: str | None,
                        parent_recipe: dict | None = None) -> dict:
        """gate -> control -> run (-> replicates) -> evaluate -> judge, shared by the bootstrap and a transition."""
        estimate = training.estimate(self, plan, parent, parent_recipe, version).as_dict()
        if not journal.is_done("gate") and not training.gate(self, journal, version, estimate):
            return {"status": "awaiting-approval", "estimate": estimate}
        if plan.control or plan.kind == "continue":
            self._phase(journal, "control", lambda: training.control(self, version, plan, parent, parent_recipe))
        ran = self._phase(journal, "run", lambda: training.run(self, version, plan, parent, parent_recipe))
        if plan.kind == "bootstrap":
            self._phase(journal, "replicates", lambda: training.replicates(self, version, plan, None))
        self._phase(journal, "evaluate", lambda: training.evaluate(self, version, plan, ran))
        judged = self._phase(journal, "judge", lambda: judge(self, version, plan, parent, parent_recipe))
        return {"status": "done", "estimate": estimate, "judged": judged}
