"""`evo step`: one journaled version transition.

    observe -> diagnose -> propose (reflect | intervene) -> commit -> backtest
    -> gate -> run -> evaluate -> judge -> decide -> record

A workspace whose baseline v0 has never been trained first bootstraps it
(gate -> run -> evaluate -> judge against the untrained base model), so the
first `evo step` has evidence to diagnose.

Every phase is journaled (`evo.loop.journal`); every side effect is
idempotent, so a step killed at any point resumes with the next `evo step`
and never writes a version, a note event or an artifact twice. The
orchestrator, never the agent, runs git and writes notes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from evo.loop import gate as gating
from evo.loop import versions as V
from evo.loop.decide import decide
from evo.loop.journal import Journal, fault_point
from evo.loop.propose import ProposalPhases, event_id
from evo.loop.report import StepReport
from evo.resources import resource_dir
from evo.settings import artifact_dir, load_settings

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
                head = V.promoted_head(records)
                if not V.is_evaluated(self.root, self.settings, head):
                    if self.dry_run:
                        return self._dry_run_untrained(head)
                    bootstrapped = self._bootstrap(head)
                    if bootstrapped["status"] != "done":
                        return self._waiting_report(head, bootstrapped)
                if self.dry_run:
                    return self._dry_run(head)
                journal = Journal.start(self.root, self.lineage.next_version(), [head])
                self.say(f"step {journal.version} from {head}")
            else:
                self.say(f"resuming {journal.version} at phase {journal.data['phase']}")
            report = self._transition(journal)
            report.bootstrapped = bootstrapped
            return report

    def _waiting_report(self, version: str, result: dict) -> StepReport:
        return StepReport(status="awaiting-approval", version=version, estimate=result.get("estimate", {}),
                          message=f"run `evo approve {version}` (or `evo reject {version}`), then `evo step`")

    # ------------------------------------------------------------- bootstrap
    def _bootstrap(self, version: str, journal: Journal | None = None) -> dict:
        """Train and judge the baseline v0 (against the untrained base model)."""
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
        result = self._gate_run_judge(journal, version, recipe, parent=None, harness_only=False)
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

        proposal = self._phase(journal, "propose", lambda: self._propose(version, parent, parent_recipe, diag))
        if proposal["status"] == "nothing":
            self.lineage.discard_version(version)
            journal.abandon()
            report.status = "nothing-to-do"
            report.message = proposal["reason"]
            return report
        manifests = proposal["manifests"]
        primary = manifests[-1]
        harness_only = report.describe_proposal(manifests)

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

        result = self._gate_run_judge(journal, version, recipe, parent=parent, harness_only=harness_only)
        report.estimate = result.get("estimate", {})
        if result.get("status") == "awaiting-approval":
            report.status = "awaiting-approval"
            report.message = f"run `evo approve {version}` (or `evo reject {version}`), then `evo step`"
            return report
        judged = result["judged"]
        report.outcome, report.headline = judged["outcome"], judged.get("headline") or {}

        dec = self._phase(journal, "decide", lambda: self._decide(version, judged, harness_only))
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

    # --------------------------------------------------------------- phases
    def _diagnose(self, version: str, recipe: dict, *, out_dir: Path, tree: Path | None = None) -> dict:
        """Diagnose `version`'s run with the analyzers in `tree` (built-ins first)."""
        from evo.harness.diagnose import diagnose

        inputs = V.diagnosis_inputs(self.lineage, self.lineage.read_all(), self.root, self.settings, version, tree=tree)
        tree = inputs.pop("tree")
        return diagnose(artifact_dir(self.root, self.settings, version), recipe=recipe, settings=self.settings,
                        analyzer_dirs=[resource_dir("analyzers"), tree / "analyzers"], version=version,
                        out_dir=out_dir, **inputs)

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

    def _gate_run_judge(self, journal: Journal, version: str, recipe: dict, *, parent: str | None,
                        harness_only: bool) -> dict:
        cost = gating.estimate(recipe, self.settings, train=not harness_only)
        estimate = cost.as_dict()
        if not journal.is_done("gate"):
            journal.begin("gate")
            events = [e.get("event") for e in self.lineage.events(version)]
            threshold = float(self.settings["gate"]["approval_above_gpu_hours"])
            approved = not gating.needs_approval(cost, self.settings) or "approved" in events
            status = "approved" if approved else "awaiting-approval"
            self.lineage.append_event(version, {
                "id": event_id(version, "gated", status), "event": "gated", "version": version,
                "estimate": estimate, "threshold": threshold, "status": status,
            })
            if status == "awaiting-approval":
                self.say(f"{version} awaits approval: estimated {estimate['gpu_hours']:.3f} GPU-h > {threshold:g}")
                return {"status": "awaiting-approval", "estimate": estimate}
            journal.complete("gate", {"estimate": estimate, "status": status})
        out = artifact_dir(self.root, self.settings, version)
        init = None if parent is None else V.checkpoint_of(self.root, self.settings, parent)

        def run():
            if harness_only:
                V.write_link(self.root, self.settings, version, parent)
                return {"checkpoint": init, "trained": False}
            from evo.train.run import train_recipe

            res = train_recipe(recipe, out, init_checkpoint=init, version=version, progress=self.progress)
            self.lineage.append_event(version, {
                "id": event_id(version, "trained"), "event": "trained", "version": version,
                "artifacts": _artifact_list(out), "metrics": res.summary.get("final", {}), "estimate": estimate,
            })
            return {"checkpoint": str(res.checkpoint_dir), "trained": True}

        ran = self._phase(journal, "run", run)

        def evaluate_phase():
            summary = out / "summary.json"
            ev = json.loads(summary.read_text()).get("eval") if ran.get("trained") and summary.exists() else None
            if ev is None:  # train_recipe evaluates its final checkpoint; a harness-only version does not train
                from evo.train.evaluate import evaluate

                ev = evaluate(ran["checkpoint"], recipe, out)
            self.lineage.append_event(version, {
                "id": event_id(version, "evaluated"), "event": "evaluated", "version": version,
                "avg_at_k": ev["avg_at_k"], "k": ev["k"], "n_tasks": ev["n_tasks"],
                "per_stratum": ev.get("per_stratum", {}),
            })
            return {"avg_at_k": ev["avg_at_k"]}

        self._phase(journal, "evaluate", evaluate_phase)
        judged = self._phase(journal, "judge", lambda: self._judge(version, recipe, parent))
        return {"status": "done", "estimate": estimate, "judged": judged}

    def _judge(self, version: str, recipe: dict, parent: str | None) -> dict:
        from evo.harness.compare import compare_runs

        diag = self._diagnose(version, recipe, out_dir=artifact_dir(self.root, self.settings, version))
        baseline = parent or V.BASE
        cmp = compare_runs(
            artifact_dir(self.root, self.settings, version), artifact_dir(self.root, self.settings, baseline),
            B=int(self.settings["search"]["bootstrap_samples"]), child_diag=diag,
        )
        vetoes = (diag.get("audits") or {}).get("vetoes", [])
        judged = {
            "id": event_id(version, "judged"), "event": "judged", "version": version, "baseline": baseline,
            "outcome": cmp["outcome"],
            "headline": {k: cmp.get(k) for k in ("metric", "value", "delta", "ci_low", "ci_high", "p_value")},
            "reasons": cmp.get("reasons", []), "vetoes": vetoes,
        }
        self.lineage.append_event(version, {
            "id": event_id(version, "diagnosed"), "event": "diagnosed", "version": version,
            "harness_version": diag.get("harness_version"), "findings": diag["counts"],
            "vetoed": bool(vetoes),
        })
        self.lineage.append_event(version, judged)
        return judged

    def _decide(self, version: str, judged: dict, harness_only: bool) -> dict:
        records = self.lineage.read_all()
        dec = decide(version, judged, harness_only=harness_only,
                     frontier=V.frontier(records, exclude=version), settings=self.settings)
        self._apply_decision(version, dec.action, dec.reason, dec.also_prune)
        return {"action": {"promote": "promoted", "prune": "pruned", "keep": "kept"}[dec.action],
                "reason": dec.reason, "also_pruned": [v for v, _ in dec.also_prune]}

    def _apply_decision(self, version: str, action: str, reason: str, also_prune: list) -> None:
        # Checked by event, not state: promote() and prune() finish a transition a kill left half-done.
        record = self.lineage.record(version)
        if action == "promote" and record.last("promoted") is None:
            self.lineage.promote(version, reason)
        elif action == "prune" and record.last("pruned") is None:
            self.lineage.prune(version, reason)
        elif action == "keep":
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
        paths = sorted({str(p.resolve().relative_to(self.root)) if p.is_absolute() else str(p) for p in changed})
        fault_point("record", "mid")  # memory written, not committed
        sha = self.lineage.commit_main(f"evo: record {version}", paths) if paths else None
        return {"commit": sha, "paths": paths}



def _artifact_list(folder: Path) -> list[dict]:
    """URI, size and sha256 of each artifact file (the checkpoint's weights included)."""
    import hashlib

    out = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.suffix == ".tmp":
            continue
        rel = path.relative_to(folder)
        if rel.parts[0] not in ("checkpoint",) and rel.name not in ("rollouts.parquet", "metrics.jsonl", "summary.json"):
            continue
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        out.append({"name": str(rel), "uri": path.resolve().as_uri(), "size": path.stat().st_size, "sha256": digest.hexdigest()})
    return out

