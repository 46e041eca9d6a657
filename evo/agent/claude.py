"""The `claude` backend: Claude Code through claude-agent-sdk, working in the candidate's worktree.

Settings (`evo.yaml` agent.claude): model, max_turns, max_budget_usd,
allowed_tools, cli_path. The session runs with `cwd` = the worktree, project
settings only (`setting_sources=["project"]`: the workspace's CLAUDE.md, not
the user's), the allowed tools and nothing else (`permission_mode="dontAsk"`
refuses anything not pre-approved), and a PreToolUse hook that denies git
writes and any path outside the worktree (`evo.agent.toolpolicy`). The CLI
itself — which runs the tools — starts in the agent's jail (`evo.agent.jail`:
the worktree writable, the workspace read-only, nothing else of the host, only
the environment `agent.env` names), so a tool call the hook let through still
cannot reach past it. Tokens and
cost come from the final ResultMessage. The SDK is an optional extra, imported
only when this backend runs.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from evo.agent.base import AgentContext, Proposal, zero_usage
from evo.agent.jail import agent_env, jailed_cli
from evo.agent.manifest import clear_manifest, read_manifest
from evo.agent.prompts import render_prompt
from evo.agent.toolpolicy import deny_reason
from evo.errors import AgentError, MissingDependencyError

SYSTEM_APPEND = (
    "You are running as the trainer agent of an EvoTrainer workspace. Work only inside the current directory "
    "(the candidate's git worktree). Do not run git commands that write; the orchestrator commits. "
    "Finish by writing the intervention manifest the prompt describes."
)


def _sdk():
    try:
        import claude_agent_sdk
    except ImportError:
        raise MissingDependencyError("claude-agent-sdk", "claude", "the claude agent backend") from None
    return claude_agent_sdk


def usage_from_result(result) -> dict:
    """Tokens, cost and turns from a ResultMessage (cache tokens count as input)."""
    raw = getattr(result, "usage", None) or {}
    input_tokens = sum(int(raw.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
    return {
        "input_tokens": input_tokens,
        "output_tokens": int(raw.get("output_tokens") or 0),
        "cost_usd": float(getattr(result, "total_cost_usd", None) or 0.0),
        "turns": int(getattr(result, "num_turns", 0) or 0),
    }


class ClaudeAgent:
    name = "claude"

    def __init__(self, settings: dict):
        self.settings = settings
        self.config = dict(settings.get("agent", {}).get("claude", {}))
        self.last_usage = zero_usage()

    def _options(self, sdk, worktree: Path, denied: list[str], stderr: list[str], ctx=None):
        async def pre_tool_use(input_data, tool_use_id, context):
            tool = input_data.get("tool_name", "")
            reason = deny_reason(tool, input_data.get("tool_input") or {}, worktree)
            if reason is None:
                return {}
            denied.append(f"{tool}: {reason}")
            return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                           "permissionDecisionReason": reason}}

        tools = list(self.config.get("allowed_tools") or [])
        cli = self.config.get("cli_path") or shutil.which("claude")
        if cli and ctx is not None:  # the CLI runs the tools: it is what the jail confines
            cli = str(jailed_cli(cli, ctx, self.settings, worktree / ".evo" / "jail"))
        return sdk.ClaudeAgentOptions(
            cwd=str(worktree),
            setting_sources=["project"],
            tools=tools,
            allowed_tools=tools,
            permission_mode="dontAsk",
            max_turns=self.config.get("max_turns"),
            max_budget_usd=self.config.get("max_budget_usd"),
            model=self.config.get("model"),
            cli_path=cli,
            env=agent_env(ctx, self.settings) if ctx is not None else {},
            system_prompt={"type": "preset", "preset": "claude_code", "append": SYSTEM_APPEND},
            hooks={"PreToolUse": [sdk.HookMatcher(matcher=None, hooks=[pre_tool_use])]},
            stderr=lambda line: stderr.append(line),
        )

    async def _session(self, sdk, prompt: str, options) -> object | None:
        result = None
        async for message in sdk.query(prompt=prompt, options=options):
            if isinstance(message, sdk.ResultMessage):
                result = message
        return result

    def propose(self, ctx: AgentContext) -> Proposal | None:
        sdk = _sdk()
        worktree = Path(ctx.worktree).resolve()
        prompt = render_prompt(ctx)
        clear_manifest(worktree)
        denied: list[str] = []
        stderr: list[str] = []
        self.last_usage = zero_usage()
        options = self._options(sdk, worktree, denied, stderr, ctx)
        try:
            result = asyncio.run(self._session(sdk, prompt, options))
        except sdk.ClaudeSDKError as exc:
            detail = (str(exc).splitlines() or [type(exc).__name__])[0]
            tail = f"; stderr: {stderr[-1].strip()}" if stderr else ""
            raise AgentError(f"claude agent failed: {detail}{tail}") from None
        if result is None:
            raise AgentError("claude agent ended without a result message; check agent.claude.cli_path and the CLI's logs")
        self.last_usage = usage_from_result(result)
        if result.is_error:
            why = "; ".join(result.errors or []) or result.result or result.subtype
            raise AgentError(f"claude agent stopped with an error ({result.subtype}): {why}; "
                             "raise agent.claude.max_turns / max_budget_usd in evo.yaml if it ran out")
        manifest = read_manifest(worktree, agent="claude")
        if manifest is None:
            return None
        return Proposal(manifest=manifest, usage=dict(self.last_usage), denied=list(denied),
                        notes=[f"claude: {result.num_turns} turns, {len(denied)} tool calls denied"])


BACKEND = ClaudeAgent  # evo.agent.base.get_agent looks it up by module name
