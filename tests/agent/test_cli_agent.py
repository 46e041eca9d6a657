"""`evo agent propose|prompt`, `evo memory show`, `evo skills show` through the real CLI entry point."""

from __future__ import annotations

import json
import shutil

from click.testing import CliRunner

from evo.agent.memory import update_memory
from evo.cli import main
from evo.resources import resource_dir


def _workspace(tmp_path, diag_metrics):
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(resource_dir("recipes") / "arithmetic-tiny.yaml", ws / "recipe.yaml")
    diag = ws / "diagnosis.json"
    diag.write_text(json.dumps({"version": "v0", "metrics": diag_metrics, "findings": []}))
    return ws, diag


def test_agent_propose_shows_the_intervention_and_changes_nothing(tmp_path):
    ws, diag = _workspace(tmp_path, {"behavior/truncated_frac": 0.4, "signal/dead_group_ratio": 0.7})
    before = (ws / "recipe.yaml").read_text()
    result = CliRunner().invoke(main, ["agent", "propose", "--diagnosis", str(diag), "-C", str(ws), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["agent"] == "heuristic" and data["manifest"]["change"] == "rollout.max_new_tokens: 4 → 8"
    assert (ws / "recipe.yaml").read_text() == before and not (ws / ".evo").exists()
    human = CliRunner().invoke(main, ["agent", "propose", "--diagnosis", str(diag), "-C", str(ws)])
    assert "policy rollout.max_new_tokens: 4 → 8" in human.output and "hypothesis:" in human.output


def test_agent_propose_on_a_healthy_diagnosis(tmp_path):
    ws, diag = _workspace(tmp_path, {"behavior/truncated_frac": 0.0, "behavior/truncated_frac_max_stratum": 0.0,
                                     "signal/dead_group_ratio": 0.0})
    result = CliRunner().invoke(main, ["agent", "propose", "--diagnosis", str(diag), "-C", str(ws)])
    assert result.exit_code == 0 and "no intervention" in result.output


def test_agent_prompt_renders_the_workspace_prompts(tmp_path):
    ws, diag = _workspace(tmp_path, {"behavior/truncated_frac": 0.4})
    result = CliRunner().invoke(main, ["agent", "prompt", "--diagnosis", str(diag), "-C", str(ws), "--phase", "reflect"])
    assert result.exit_code == 0, result.output
    assert "behavior/truncated_frac = 0.4" in result.output and "reflect on the harness" in result.output


def test_memory_show_json(tmp_path):
    lineage = [{"name": "v0", "parents": [], "state": "promoted", "intervention": None},
               {"name": "v1", "parents": ["v0"], "state": "pruned", "outcome": "regression",
                "intervention": {"kind": "policy", "factor": "grpo.learning_rate", "change": "grpo.learning_rate: 0.0005 → 0.005"}}]
    update_memory(tmp_path, lineage, {})
    result = CliRunner().invoke(main, ["memory", "show", "-C", str(tmp_path), "--json"])
    data = json.loads(result.output)
    assert data["negative_evidence"][0]["versions"] == ["v1"] and "| v1 | v0 | pruned |" in data["lineage"]
    human = CliRunner().invoke(main, ["memory", "show", "-C", str(tmp_path)]).output
    assert "never retry" in human and "grpo.learning_rate: 0.0005 → 0.005" in human


def test_skills_show_and_unknown_skill(tmp_path):
    result = CliRunner().invoke(main, ["skills", "show", "instruction-following-judge-bonus", "-C", str(tmp_path), "--json"])
    data = json.loads(result.output)
    assert data["patch"][0]["value"] == {"name": "judge_if", "weight": 0.1, "mode": "add"} and data["uses"] == 0
    bad = CliRunner().invoke(main, ["skills", "show", "nope", "-C", str(tmp_path)])
    assert bad.exit_code == 1 and "no skill named 'nope'" in bad.output
