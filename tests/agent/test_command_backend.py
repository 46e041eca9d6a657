"""The command backend: any agent CLI, prompt on stdin, worktree as cwd."""

from __future__ import annotations

import shlex
import sys

import pytest

from evo import confine
from evo.agent import get_agent
from evo.errors import AgentError
from evo.settings import normalize_settings

pytestmark = pytest.mark.skipif(not confine.available(), reason="the agent runs confined: bubblewrap cannot build a jail on this machine (make test installs it where it can)")

AGENT = r'''
import json, os, pathlib, sys
prompt = sys.stdin.read()
mode = sys.argv[1]
pathlib.Path("prompt_seen.txt").write_text(prompt + "\nVERSION=" + os.environ["EVO_VERSION"])
if mode == "fail":
    print("model quota exhausted", file=sys.stderr)
    sys.exit(3)
if mode == "sleep":
    import time; time.sleep(30)
recipe = pathlib.Path("recipe.yaml")
recipe.write_text(recipe.read_text().replace("max_new_tokens: 4", "max_new_tokens: 8"))
if mode == "ok":
    manifest = {"kind": "policy", "factor": "rollout.max_new_tokens", "change": "rollout.max_new_tokens: 4 -> 8",
                "hypothesis": "truncation", "evidence": {"findings": ["behavior.truncation"]},
                "predicted_effect": "less truncation", "expected_cost": "x2"}
    pathlib.Path(".evo").mkdir(exist_ok=True)
    pathlib.Path(os.environ["EVO_MANIFEST"]).write_text(json.dumps(manifest))
    pathlib.Path(".evo/usage.json").write_text(json.dumps({"input_tokens": 900, "output_tokens": 80, "cost_usd": 0.01}))
'''


@pytest.fixture
def agent_script(tmp_path):
    path = tmp_path / "my agent.py"  # a space, to exercise shlex quoting
    path.write_text(AGENT)
    return path


def _settings(script, mode, timeout_s=60):
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {mode}"
    return normalize_settings({"domain": "arithmetic", "model": "builtin:tiny-char",
                               "agent": {"backend": "command", "command": command, "timeout_s": timeout_s}})


def test_command_agent_edits_worktree_and_returns_manifest(agent_script, worktree, make_ctx, kit):
    ctx = make_ctx(kit.diagnosis({"behavior/truncated_frac": 0.5}, [kit.finding("behavior.truncation")]))
    proposal = get_agent(_settings(agent_script, "ok")).propose(ctx)
    assert proposal.manifest["factor"] == "rollout.max_new_tokens"
    assert "max_new_tokens: 8" in (worktree / "recipe.yaml").read_text()
    assert proposal.usage == {"input_tokens": 900, "output_tokens": 80, "cost_usd": 0.01, "turns": 1}
    seen = (worktree / "prompt_seen.txt").read_text()
    assert "behavior/truncated_frac = 0.5" in seen and seen.endswith("VERSION=v9")


def test_nonzero_exit_is_one_line_error_with_the_reason(agent_script, worktree, make_ctx, kit):
    with pytest.raises(AgentError) as info:
        get_agent(_settings(agent_script, "fail")).propose(make_ctx(kit.diagnosis({})))
    assert "exited with status 3: model quota exhausted" in str(info.value) and "\n" not in str(info.value)


def test_missing_manifest_is_an_error(agent_script, worktree, make_ctx, kit):
    with pytest.raises(AgentError, match="without writing .evo/manifest.json"):
        get_agent(_settings(agent_script, "no-manifest")).propose(make_ctx(kit.diagnosis({})))


def test_timeout_is_an_error(agent_script, worktree, make_ctx, kit):
    with pytest.raises(AgentError, match="ran past agent.timeout_s = 1 s"):
        get_agent(_settings(agent_script, "sleep", timeout_s=1)).propose(make_ctx(kit.diagnosis({})))


def test_missing_or_empty_command(tmp_path, make_ctx, kit):
    settings = normalize_settings({"domain": "arithmetic", "model": "builtin:tiny-char", "agent": {"backend": "command"}})
    with pytest.raises(AgentError, match="agent.command is empty"):
        get_agent(settings)
    settings["agent"]["command"] = str(tmp_path / "not-installed-agent")
    with pytest.raises(AgentError, match="not found; check evo.yaml agent.command"):
        get_agent(settings).propose(make_ctx(kit.diagnosis({})))


def test_unknown_backend(settings):
    with pytest.raises(AgentError, match="unknown agent backend 'gpt'; use one of heuristic, claude, command"):
        get_agent(settings, backend="gpt")
