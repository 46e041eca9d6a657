"""Memory: regenerated from lineage each step, idempotent on resume, consulted by the agent."""

from __future__ import annotations

import json

import pytest

from evo.agent.memory import Memory, tried_on_path, update_memory
from evo.errors import AgentError

LINEAGE = [
    {"name": "v0", "parents": [], "state": "promoted", "intervention": None, "outcome": None, "headline": None},
    {"name": "v1", "parents": ["v0"], "state": "promoted", "outcome": "improvement",
     "intervention": {"kind": "policy", "factor": "rollout.max_new_tokens", "change": "rollout.max_new_tokens: 4 → 8",
                      "skill": "raise-generation-length"},
     "headline": {"metric": "score/avg_at_k", "value": 0.31, "delta": 0.19, "ci_low": 0.12, "ci_high": 0.26}},
    {"name": "v2", "parents": ["v1"], "state": "pruned", "outcome": "regression",
     "intervention": {"kind": "policy", "factor": "reward.terms", "change": "reward.terms: a → b", "skill": "continuous-partial-credit"},
     "headline": {"metric": "score/avg_at_k", "value": 0.25, "delta": -0.06, "ci_low": -0.1, "ci_high": -0.02}},
    {"name": "v3", "parents": ["v1"], "state": "pruned", "outcome": "insufficient",
     "intervention": {"kind": "policy", "factor": "reward.terms", "change": "reward.terms: a → b"},
     "headline": {"metric": "score/avg_at_k", "value": 0.3, "delta": -0.01, "ci_low": -0.05, "ci_high": 0.03}},
    {"name": "v4", "parents": ["v1"], "state": "frontier", "outcome": None, "headline": None,
     "intervention": {"kind": "policy", "factor": "filters.std_group", "change": "filters.std_group.enabled: false → true"}},
]

DIAGNOSES = {
    "v0": {"findings": [{"id": "behavior.truncation", "severity": "warning", "message": "60% truncated"},
                        {"id": "signal.dead_groups", "severity": "warning", "message": "80% dead"}]},
    "v1": {"findings": [{"id": "signal.dead_groups", "severity": "critical", "message": "70% dead"}]},
    "v2": {"findings": [{"id": "signal.dead_groups", "severity": "warning", "message": "65% dead"},
                        {"id": "score.saturated", "severity": "info", "message": "x"}]},
}


def test_update_memory_writes_every_file_and_is_idempotent(tmp_path):
    changed = update_memory(tmp_path, LINEAGE, DIAGNOSES)
    assert sorted(changed) == sorted(f"memory/{n}" for n in ("lineage.md", "recurring_cases.md", "negative_evidence.md",
                                                              "negative_evidence.jsonl", "search_notes.md"))
    assert update_memory(tmp_path, LINEAGE, DIAGNOSES) == []  # a resumed step changes nothing

    lineage_md = (tmp_path / "memory" / "lineage.md").read_text()
    assert "Promoted path: v0 → v1" in lineage_md
    assert "| v1 | v0 | promoted | policy rollout.max_new_tokens: 4 → 8 (raise-generation-length) | improvement |" in lineage_md
    assert "+0.19 [+0.12, +0.26]" in lineage_md


def test_negative_evidence_groups_refuted_interventions(tmp_path):
    update_memory(tmp_path, LINEAGE, DIAGNOSES)
    memory = Memory.load(tmp_path)
    (entry,) = memory.negative
    assert entry["factor"] == "reward.terms" and entry["versions"] == ["v2", "v3"]
    assert entry["outcomes"] == ["regression", "insufficient"]
    assert memory.refuted("reward.terms", "reward.terms: a → b") is entry
    assert memory.refuted("rollout.max_new_tokens", "rollout.max_new_tokens: 4 → 8") is None
    text = (tmp_path / "memory" / "negative_evidence.md").read_text()
    assert "`reward.terms: a → b` (skill continuous-partial-credit): regression, insufficient in v2, v3" in text
    assert "Refuted interventions (never retry these)" in memory.digest()


def test_manual_negative_evidence_survives_regeneration(tmp_path):
    update_memory(tmp_path, LINEAGE, DIAGNOSES)
    path = tmp_path / "memory" / "negative_evidence.jsonl"
    manual = {"factor": "grpo.learning_rate", "change": "grpo.learning_rate: 0.0005 → 0.005", "source": "manual",
              "versions": [], "outcomes": ["diverged in a side experiment"]}
    path.write_text(path.read_text() + json.dumps(manual) + "\n")
    update_memory(tmp_path, LINEAGE, DIAGNOSES)
    assert Memory.load(tmp_path).refuted("grpo.learning_rate", "grpo.learning_rate: 0.0005 → 0.005")


def test_recurring_cases_count_versions(tmp_path):
    update_memory(tmp_path, LINEAGE, DIAGNOSES)
    text = (tmp_path / "memory" / "recurring_cases.md").read_text()
    assert "**signal.dead_groups** (critical) — 3 versions: v0, v1, v2. Latest: 65% dead" in text
    assert "behavior.truncation" not in text and "score.saturated" not in text  # seen once only


def test_search_notes_are_append_only(tmp_path):
    update_memory(tmp_path, LINEAGE[:2], DIAGNOSES)
    notes = tmp_path / "memory" / "search_notes.md"
    notes.write_text(notes.read_text() + "- a person's note: try a curriculum later\n")
    changed = update_memory(tmp_path, LINEAGE, DIAGNOSES)
    assert "memory/search_notes.md" in changed
    text = notes.read_text()
    assert "a person's note" in text
    assert text.count("<!-- evo:v1 -->") == 1 and text.count("<!-- evo:v2 -->") == 1
    assert "<!-- evo:v4 -->" not in text  # not judged yet
    assert text.index("a person's note") < text.index("<!-- evo:v2 -->")


def test_memory_of_a_fresh_workspace_is_empty(tmp_path):
    memory = Memory.load(tmp_path)
    assert memory.negative == [] and "empty" in memory.digest()


def test_tried_on_path_follows_first_parents():
    tried = tried_on_path(LINEAGE, "v4")
    assert ("filters.std_group", "filters.std_group.enabled: false → true") in tried
    assert ("rollout.max_new_tokens", "rollout.max_new_tokens: 4 → 8") in tried
    assert ("reward.terms", "reward.terms: a → b") not in tried  # a sibling branch, not an ancestor


def test_malformed_negative_evidence_line_is_a_clear_error(tmp_path):
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "negative_evidence.jsonl").write_text('{"factor": "a", "change": "b"}\nnot json\n')
    with pytest.raises(AgentError, match="negative_evidence.jsonl: line 2 is not JSON"):
        Memory.load(tmp_path)


def test_a_version_pruned_before_judgement_refutes_nothing(tmp_path):
    rejected = [{"name": "v5", "parents": ["v1"], "state": "pruned", "outcome": None, "headline": None,
                 "intervention": {"kind": "policy", "factor": "rollout.max_new_tokens", "change": "rollout.max_new_tokens: 8 → 16"}}]
    update_memory(tmp_path, LINEAGE + rejected, DIAGNOSES)
    assert Memory.load(tmp_path).refuted("rollout.max_new_tokens", "rollout.max_new_tokens: 8 → 16") is None
