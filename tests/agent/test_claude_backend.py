"""The claude backend driving the REAL claude-agent-sdk against a fake CLI (tests/agent/fake_claude_cli.py).

The fake speaks the SDK's stream-json control protocol, asks the SDK's
PreToolUse hook before every tool call, and performs only what the hook allows,
in its cwd. So these tests observe real effects: the worktree edit lands, a
denied `git commit` leaves the history alone, a denied write outside the
worktree never appears.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evo import confine
from evo.agent import get_agent
from evo.agent.guard import check_candidate
from evo.errors import AgentError, MissingDependencyError
from evo.settings import normalize_settings

pytest.importorskip("claude_agent_sdk")
pytestmark = pytest.mark.skipif(not confine.available(), reason="the agent runs confined: bubblewrap cannot build a jail on this machine (make test installs it where it can)")

FAKE_CLI = Path(__file__).with_name("fake_claude_cli.py")
_spec = importlib.util.spec_from_file_location("fake_claude_cli", FAKE_CLI)
_fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fake)
flag = _fake.flag  # reads an option as the CLI does, whichever way the SDK spelled it
MANIFEST = {"kind": "policy", "factor": "rollout.max_new_tokens", "change": "rollout.max_new_tokens: 4 → 8",
            "hypothesis": "62% of responses truncate (behavior.truncation)", "evidence": ["behavior.truncation"],
            "predicted_effect": "truncation below 5%", "expected_cost": "x2 generation"}


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo_worktree(worktree):
    _git(worktree, "init", "-q")
    _git(worktree, "-c", "user.email=t@example.com", "-c", "user.name=t", "add", "recipe.yaml")
    _git(worktree, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "parent")
    return worktree


@pytest.fixture
def fake_cli(tmp_path, worktree, monkeypatch):
    """Returns (cli_path, run(actions, **script) -> log entries).

    The CLI runs in the agent's jail: it sees the worktree writable (so its log
    goes there), the workspace read-only, and the fake's own folder because
    `_settings` lists it in agent.sandbox.read_only.
    """
    cli = tmp_path / "bin" / "claude"
    cli.parent.mkdir()
    cli.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE_CLI} \"$@\"\n")
    cli.chmod(0o755)
    (worktree / ".evo").mkdir(exist_ok=True)
    log = worktree / ".evo" / "fake_cli_log.jsonl"

    def script(actions, **extra):
        path = tmp_path / "script.json"
        path.write_text(json.dumps({"actions": actions, "log": str(log), **extra}))
        monkeypatch.setenv("FAKE_CLAUDE_SCRIPT", str(path))

    def entries():
        return [json.loads(line) for line in log.read_text().splitlines()]

    return cli, script, entries


def _settings(cli, **claude):
    return normalize_settings({"domain": "arithmetic", "model": "builtin:tiny-char",
                               "agent": {"backend": "claude", "env": ["FAKE_CLAUDE_SCRIPT"],
                                         "sandbox": {"read_only": [str(FAKE_CLI.parent)]},
                                         "claude": {"cli_path": str(cli), "max_turns": 7, **claude}}})


def test_edits_the_worktree_records_usage_and_denies_forbidden_actions(fake_cli, repo_worktree, make_ctx, kit, tmp_path):
    cli, script, entries = fake_cli
    outside = tmp_path / "outside.txt"
    script([
        {"tool": "Read", "input": {"file_path": "recipe.yaml"}},
        {"tool": "Edit", "input": {"file_path": "recipe.yaml", "old_string": "max_new_tokens: 4", "new_string": "max_new_tokens: 8"}},
        {"tool": "Bash", "input": {"command": "git commit -am 'agent commits behind the orchestrator'"}},
        {"tool": "Write", "input": {"file_path": str(outside), "content": "escaped"}},
        {"tool": "Bash", "input": {"command": "echo leak > ../outside-bash.txt"}},
        {"tool": "WebFetch", "input": {"url": "https://example.com"}},
        {"tool": "Bash", "input": {"command": "git status --short"}},
        {"tool": "Write", "input": {"file_path": ".evo/manifest.json", "content": json.dumps(MANIFEST)}},
    ], usage={"input_tokens": 1500, "cache_read_input_tokens": 500, "output_tokens": 420}, cost=0.0375)
    settings = _settings(cli)
    ctx = make_ctx(kit.diagnosis({"behavior/truncated_frac": 0.62}, [kit.finding("behavior.truncation")]))
    head_before = _git(repo_worktree, "rev-parse", "HEAD")

    proposal = get_agent(settings).propose(ctx)

    # the allowed edit landed, and the manifest was read from the worktree
    assert "max_new_tokens: 8" in (repo_worktree / "recipe.yaml").read_text()
    assert proposal.manifest["factor"] == "rollout.max_new_tokens"
    assert proposal.manifest["evidence"] == {"findings": ["behavior.truncation"], "metrics": {}}
    # tokens and cost come from the result message (cache reads count as input)
    assert proposal.usage == {"input_tokens": 2000, "output_tokens": 420, "cost_usd": 0.0375, "turns": 9}
    # forbidden actions were denied by the hook and had no effect
    assert _git(repo_worktree, "rev-parse", "HEAD") == head_before
    assert not outside.exists() and not (repo_worktree.parent / "outside-bash.txt").exists()
    assert len(proposal.denied) == 3
    assert any("git commit" in d for d in proposal.denied)
    tools = [e for e in entries() if e["kind"] == "tool"]
    assert [t["denied"] is not None for t in tools] == [False, False, True, True, True, True, False, False]
    assert "not in --allowedTools" in tools[5]["denied"]  # WebFetch: refused by the permission mode, not the hook
    # the session ran in the worktree, with project settings only and the configured limits
    start = entries()[0]
    assert Path(start["cwd"]).resolve() == repo_worktree.resolve()
    argv = start["argv"]
    # the SDK spells a valued option `--flag value` or (0.2.19x) `--flag=value`; the CLI accepts both
    assert flag(argv, "--setting-sources") == "project"
    assert flag(argv, "--max-turns") == "7"
    assert flag(argv, "--permission-mode") == "dontAsk"
    assert flag(argv, "--allowedTools") == "Read,Edit,Write,Glob,Grep,Bash"
    prompt = next(e for e in entries() if e["kind"] == "prompt")["text"]
    assert "behavior/truncated_frac = 0.62" in prompt and ".evo/manifest.json" in prompt
    # and the orchestrator's guard accepts what the agent left behind
    check_candidate(["recipe.yaml"], proposal.manifest, ctx.recipe, (repo_worktree / "recipe.yaml").read_text(), settings)


def test_none_manifest_means_no_intervention(fake_cli, worktree, make_ctx, kit):
    cli, script, _ = fake_cli
    script([{"tool": "Write", "input": {"file_path": ".evo/manifest.json",
                                         "content": json.dumps({"kind": "none", "reason": "healthy"})}}],
           usage={"input_tokens": 10, "output_tokens": 5}, cost=0.001)
    agent = get_agent(_settings(cli))
    assert agent.propose(make_ctx(kit.diagnosis({}))) is None
    assert agent.last_usage["cost_usd"] == 0.001  # spent even though nothing was proposed


def test_missing_manifest_is_an_agent_error(fake_cli, worktree, make_ctx, kit):
    cli, script, _ = fake_cli
    (worktree / ".evo").mkdir(exist_ok=True)
    (worktree / ".evo" / "manifest.json").write_text(json.dumps(MANIFEST))  # stale, from an earlier attempt
    script([{"tool": "Read", "input": {"file_path": "recipe.yaml"}}])
    with pytest.raises(AgentError, match="without writing .evo/manifest.json"):
        get_agent(_settings(cli)).propose(make_ctx(kit.diagnosis({})))


def test_invalid_manifest_is_an_agent_error(fake_cli, worktree, make_ctx, kit):
    cli, script, _ = fake_cli
    script([{"tool": "Write", "input": {"file_path": ".evo/manifest.json", "content": json.dumps({"kind": "policy"})}}])
    with pytest.raises(AgentError, match="required key is missing"):
        get_agent(_settings(cli)).propose(make_ctx(kit.diagnosis({})))


def test_error_result_is_an_agent_error_with_usage_kept(fake_cli, worktree, make_ctx, kit):
    cli, script, _ = fake_cli
    script([], error="error_max_turns", usage={"input_tokens": 50, "output_tokens": 5}, cost=0.02)
    agent = get_agent(_settings(cli))
    with pytest.raises(AgentError, match="error_max_turns.*max_turns"):
        agent.propose(make_ctx(kit.diagnosis({})))
    assert agent.last_usage["cost_usd"] == 0.02


def test_missing_cli_is_an_agent_error(tmp_path, make_ctx, kit):
    with pytest.raises(AgentError, match="claude agent failed"):
        get_agent(_settings(tmp_path / "no-such-claude")).propose(make_ctx(kit.diagnosis({})))


def test_missing_sdk_is_a_missing_dependency_error(monkeypatch, tmp_path, make_ctx, kit):
    monkeypatch.setitem(sys.modules, "claude_agent_sdk", None)  # makes `import claude_agent_sdk` fail
    with pytest.raises(MissingDependencyError, match=r"pip install 'evotrainer\[claude\]'"):
        get_agent(_settings(tmp_path / "claude")).propose(make_ctx(kit.diagnosis({})))
