"""`evo step --dry-run`: diagnose and propose in a throw-away candidate, show the cost, change nothing.

Refs, notes and the journal are never written; the candidate's branch and
worktree are removed again whatever happens.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from evo.loop import gate as gating
from evo.loop import propose, training
from evo.loop import runs as R
from evo.loop import versions as V
from evo.loop.report import StepReport
from evo.loop.runs import Plan
from evo.recipe import parse_recipe
from evo.settings import artifact_dir


def dry_run_untrained(ws, head: str) -> StepReport:
    recipe = V.recipe_of(ws.lineage, head)
    est = gating.estimate(recipe, ws.config.gate).as_dict()
    return StepReport(status="dry-run", version=head, estimate=est,
                      intervention="(none: the baseline must be trained first)",
                      message=f"the next step would first train baseline {head}")


def dry_run(ws, head: str, human: dict | None = None) -> StepReport:
    """Diagnose and propose in a throw-away candidate, estimate its cost, discard it."""
    version = ws.lineage.next_version()
    parent_recipe = V.recipe_of(ws.lineage, head)
    diag = ws.diagnosis_ref(head, parent_recipe)
    try:
        proposal = propose.propose(ws, version, head, parent_recipe, diag, human)
        report = StepReport(status="dry-run", version=version, parents=[head])
        if proposal["status"] == "nothing":
            report.message = proposal["reason"]
            return report
        manifests = proposal["manifests"]
        kind = report.describe_proposal(manifests)
        if proposal.get("violation"):
            report.message = f"the candidate would be rejected: {proposal['violation']}"
        recipe = parse_recipe((Path(ws.lineage.worktree_path(version)) / "recipe.yaml").read_text())
        control = ws.config.search.control == "continue" and kind == "policy"
        plan = Plan(kind, recipe, R.version_seeds(recipe, manifests[-1], ws.config.search.train_seeds), control=control,
                    control_steps=R.control_steps(parent_recipe, recipe, manifests[-1]))
        cost = training.estimate(ws, plan, head, parent_recipe)
        report.estimate = cost.as_dict()
        start = training.repair_start(ws, head, recipe) if kind == "policy" else None
        if start:
            report.message = (report.message + "; " if report.message else "") + \
                f"it would train from {start}'s policy, not {head}'s (a repair, or {head}'s training harmed it)"
        if gating.needs_approval(cost, ws.config.gate):
            report.message = (report.message + "; " if report.message else "") + "it would wait for approval"
        return report
    finally:
        ws.lineage.discard_version(version)
        shutil.rmtree(artifact_dir(ws.root, ws.settings, version), ignore_errors=True)
