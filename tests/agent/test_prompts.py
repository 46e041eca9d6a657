"""Prompt rendering from the workspace's trainer_prompts/ (built-ins as fallback)."""

from __future__ import annotations

import pytest

from evo.agent.memory import Memory, update_memory
from evo.agent.prompts import render_prompt
from evo.errors import AgentError

LINEAGE = [
    {"name": "v0", "parents": [], "state": "promoted", "intervention": None},
    {"name": "v1", "parents": ["v0"], "state": "pruned", "outcome": "regression",
     "intervention": {"kind": "policy", "factor": "reward.terms", "change": "reward.terms: x → y"}},
]


@pytest.fixture
def ctx(make_ctx, kit, tmp_path):
    update_memory(tmp_path, LINEAGE, {})
    diag = kit.diagnosis({"behavior/truncated_frac": 0.62},
                         [kit.finding("behavior.truncation", message="62% of validation responses hit the limit", rows=["t1#0"])])
    return make_ctx(diag, lineage=LINEAGE, memory=Memory.load(tmp_path))


def test_propose_prompt_carries_evidence_memory_skills_and_rules(ctx, settings):
    text = render_prompt(ctx)
    assert "behavior/truncated_frac = 0.62" in text
    assert "[warning] behavior.truncation: 62% of validation responses hit the limit (rows: t1#0)" in text
    assert "never retry" in text.lower() and "reward.terms: x → y" in text  # memory's negative evidence
    assert "raise-generation-length" in text and "REFUTED" in text  # skills, with the negative-evidence one
    assert "trains from the last policy trained without it" in text  # a repair says where it trains from
    assert "recipe.yaml, analyzers/**" in text and "evo.yaml" in text  # allowed / protected paths
    assert ".evo/manifest.json" in text and '"kind": "none"' in text  # the manifest format
    assert "max_new_tokens: 4" in text  # the worktree's recipe as written
    assert "propose one intervention" in text and "reflect on the harness" not in text
    assert "$" not in text.replace("$$", "")


def test_reflect_phase_uses_reflect_prompt(ctx):
    ctx.phase = "reflect"
    text = render_prompt(ctx)
    assert "reflect on the harness" in text and "propose one intervention" not in text


def test_explore_phase_quotes_the_plateau_and_asks_for_the_exploration_field(ctx):
    ctx.phase, ctx.plateau = "explore", "continuing v0's recipe for 20 steps gave Δ +0.010 [-0.030, +0.050]"
    text = render_prompt(ctx)
    assert "explore one untried lever" in text and "propose one intervention" not in text
    assert "gave Δ +0.010 [-0.030, +0.050]" in text and '"exploration"' in text


def test_workspace_prompts_override_builtins(ctx, tmp_path):
    (tmp_path / "trainer_prompts").mkdir()
    (tmp_path / "trainer_prompts" / "propose.md").write_text("CUSTOM for ${version}: $manifest_path\n$manifest_format\n")
    text = render_prompt(ctx, root=tmp_path)
    assert "CUSTOM for v9: .evo/manifest.json" in text
    assert "## The parent's diagnosis" in text  # diagnose.md still from the built-ins


def test_unknown_placeholder_is_a_clear_error(ctx, tmp_path):
    (tmp_path / "trainer_prompts").mkdir()
    path = tmp_path / "trainer_prompts" / "propose.md"
    path.write_text("Use $diagnosis_digest here\n$manifest_format\n")
    with pytest.raises(AgentError) as info:
        render_prompt(ctx, root=tmp_path)
    assert str(path) in str(info.value) and "unknown placeholder $diagnosis_digest" in str(info.value)


def test_lone_dollar_is_a_clear_error(ctx, tmp_path):
    (tmp_path / "trainer_prompts").mkdir()
    (tmp_path / "trainer_prompts" / "propose.md").write_text("costs $ 5\n$manifest_format\n")
    with pytest.raises(AgentError, match=r"line 1: a lone '\$'"):
        render_prompt(ctx, root=tmp_path)


def test_prompts_without_a_required_placeholder_are_rejected(ctx, tmp_path):
    (tmp_path / "trainer_prompts").mkdir()
    (tmp_path / "trainer_prompts" / "propose.md").write_text("Do something clever.\n")
    with pytest.raises(AgentError, match=r"never use \$manifest_format"):
        render_prompt(ctx, root=tmp_path)
