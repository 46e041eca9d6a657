"""Unit tests of the loop's pure parts: decision rules, cost gate and budgets, the journal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from evo.loop import gate as gating
from evo.loop.decide import decide
from evo.loop.journal import Journal
from evo.settings import LoopSettings, normalize_settings

SETTINGS = LoopSettings.of(normalize_settings({"domain": "arithmetic", "model": "builtin:tiny-char", "search": {"frontier_size": 2}}))


@dataclass
class Rec:
    name: str
    headline: dict = field(default_factory=dict)
    events: list = field(default_factory=list)


def judged(outcome, delta=0.05, value=0.5, vetoes=()):
    return {"outcome": outcome, "vetoes": list(vetoes),
            "headline": {"metric": "score/avg_at_k", "value": value, "delta": delta, "ci_low": delta - 0.03, "ci_high": delta + 0.03}}


def test_improvement_promotes_and_prunes_superseded_frontier():
    frontier = [Rec("v2", {"value": 0.4}), Rec("v3", {"value": 0.7})]
    d = decide("v4", judged("improvement", value=0.6), harness_only=False, frontier=frontier, frontier_size=SETTINGS.search.frontier_size)
    assert d.action == "promote"
    assert [v for v, _ in d.also_prune] == ["v2"]  # below the new head; v3 is better and stays
    assert "CI [+0.020, +0.080]" in d.reason


def test_veto_beats_any_score():
    d = decide("v4", judged("improvement", vetoes=[{"audit": "leakage", "message": "git log in 12 trajectories"}]),
               harness_only=False, frontier=[], frontier_size=SETTINGS.search.frontier_size)
    assert d.action == "prune" and "leakage" in d.reason


@pytest.mark.parametrize("outcome,delta,action", [
    ("regression", -0.1, "prune"),
    ("mixed", 0.02, "keep"),
    ("insufficient", 0.01, "keep"),
    ("insufficient", -0.01, "prune"),
])
def test_outcome_classes_map_to_decisions(outcome, delta, action):
    d = decide("v4", judged(outcome, delta=delta), harness_only=False, frontier=[], frontier_size=SETTINGS.search.frontier_size)
    assert d.action == action
    if outcome == "mixed":
        assert "ablation scheduled" in d.reason


def test_full_frontier_prunes_its_weakest():
    frontier = [Rec("v2", {"value": 0.40}), Rec("v3", {"value": 0.45})]
    keep = decide("v4", judged("insufficient", delta=0.01, value=0.5), harness_only=False, frontier=frontier, frontier_size=SETTINGS.search.frontier_size)
    assert keep.action == "keep" and [v for v, _ in keep.also_prune] == ["v2"]
    weakest = decide("v5", judged("insufficient", delta=0.0, value=0.3), harness_only=False, frontier=frontier, frontier_size=SETTINGS.search.frontier_size)
    assert weakest.action == "prune" and "frontier is full" in weakest.reason


def test_harness_only_revision_is_adopted_unless_vetoed_or_worse():
    assert decide("v4", judged("insufficient", delta=0.0), harness_only=True, frontier=[], frontier_size=SETTINGS.search.frontier_size).action == "promote"
    assert decide("v4", judged("regression", delta=-0.2), harness_only=True, frontier=[], frontier_size=SETTINGS.search.frontier_size).action == "prune"


def test_budgets_stop_with_the_key_to_raise():
    settings = LoopSettings.of(normalize_settings({"domain": "arithmetic", "model": "m", "budget": {"max_steps": 2}}))
    created = {"event": "created", "intervention": {"factor": "x"}, "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.5}}
    records = {"v1": Rec("v1", events=[created]), "v2": Rec("v2", events=[created])}
    with pytest.raises(gating.BudgetExceeded, match=r"budget.max_steps is spent \(2 steps taken of 2\); raise budget.max_steps"):
        gating.check_budgets(records, settings.budget)
    used = gating.spent(records)
    assert used["agent_tokens"] == 30 and used["agent_cost_usd"] == pytest.approx(1.0)


def test_cost_estimate_scales_with_the_recipe():
    from evo.recipe import parse_recipe

    small = parse_recipe("domain: {name: arithmetic}\nmodel: {name: builtin:tiny-char}\ngrpo: {steps: 2}\n")
    big = parse_recipe("domain: {name: arithmetic}\nmodel: {name: builtin:tiny-char}\ngrpo: {steps: 2000}\n")
    a, b = gating.estimate(small, SETTINGS.gate), gating.estimate(big, SETTINGS.gate)
    assert b.tokens_generated > 100 * a.tokens_generated > 0
    assert not gating.needs_approval(a, SETTINGS.gate)
    costly = LoopSettings.of(normalize_settings({"domain": "arithmetic", "model": "m", "gate": {"approval_above_gpu_hours": a.gpu_hours / 2}})).gate
    assert gating.needs_approval(a, costly)


def test_journal_resumes_phases_and_survives_sigkill(tmp_path):
    j = Journal.start(tmp_path, "v3", ["v2"])
    j.begin("diagnose")
    j.complete("diagnose", {"path": "x"})
    again = Journal.load(tmp_path)
    assert again.version == "v3" and again.is_done("diagnose") and again.result("diagnose") == {"path": "x"}
    assert not again.is_done("propose")
    # A process killed by SIGKILL inside a phase leaves the journal at that phase, parseable.
    code = (
        "import sys; from pathlib import Path; from evo.loop.journal import Journal;"
        f"j = Journal.load(Path({str(tmp_path)!r})); j.begin('propose')"
    )
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, "EVO_FAULT_KILL_AT": "propose"})
    assert proc.returncode == -9
    data = json.loads((tmp_path / ".evo/journal/current.json").read_text())
    assert data["phase"] == "propose" and data["phases_done"] == ["diagnose"]
    archived = Journal.load(tmp_path).finish()
    assert archived.exists() and Journal.load(tmp_path) is None


def test_corrupt_journal_is_a_one_line_error(tmp_path):
    path = Journal.path_for(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    from evo.errors import WorkspaceError

    with pytest.raises(WorkspaceError, match="unreadable step journal .* remove it"):
        Journal.load(tmp_path)


def test_remote_artifact_root_is_refused_with_the_fix():
    from evo.errors import ConfigError

    with pytest.raises(ConfigError, match=r"evo.yaml: artifacts.root: 's3://bucket/runs' is a URL; .* use a local path"):
        normalize_settings({"domain": "arithmetic", "model": "m", "artifacts": {"root": "s3://bucket/runs"}})
