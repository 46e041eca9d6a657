"""The `command` backend: any coding-agent CLI, given the prompt on stdin, run in the worktree.

`evo.yaml`:

    agent:
      backend: command
      command: "codex exec --full-auto -"     # split with shlex; no shell
      timeout_s: 1800

The agent edits files in its working directory (the candidate's worktree) and
writes the manifest to `.evo/manifest.json`. It may report what it cost in
`.evo/usage.json` (`{"input_tokens", "output_tokens", "cost_usd", "turns"}`).
It runs confined (`evo.agent.jail`): its worktree writable, the workspace
read-only, nothing else of the host, only the environment variables
`agent.env` names plus EVO_WORKTREE, EVO_VERSION, EVO_PARENT, EVO_PHASE and
EVO_MANIFEST. A non-zero exit, a timeout or a missing manifest is a one-line
AgentError. Such a CLI is not hooked the way the claude backend is; the
candidate guard still checks its diff, and the loop checks nothing outside the
worktree changed.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from evo.agent import jail
from evo.agent.base import AgentContext, Proposal, zero_usage
from evo.agent.manifest import USAGE_RELPATH, clear_manifest, read_manifest
from evo.agent.prompts import render_prompt
from evo.errors import AgentError


class CommandAgent:
    name = "command"

    def __init__(self, settings: dict):
        agent = settings.get("agent", {})
        line = agent.get("command")
        if not line or not str(line).strip():
            raise AgentError("evo.yaml: agent.command is empty; set it to the agent CLI's command line (the prompt arrives on stdin)")
        try:
            self.argv = shlex.split(str(line))
        except ValueError as exc:
            raise AgentError(f"evo.yaml: agent.command: {line!r} does not parse ({exc}); fix its quoting") from None
        self.timeout_s = int(agent.get("timeout_s") or 1800)
        self.settings = settings
        self.last_usage = zero_usage()

    def _read_usage(self, worktree: Path) -> dict:
        usage = zero_usage()
        usage["turns"] = 1
        path = worktree / USAGE_RELPATH
        if path.exists():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                raise AgentError(f"{path}: not valid JSON; the agent's usage report must be one JSON object") from None
            for key in usage:
                if isinstance(data.get(key), (int, float)):
                    usage[key] = type(usage[key])(data[key])
        return usage

    def propose(self, ctx: AgentContext) -> Proposal | None:
        worktree = Path(ctx.worktree).resolve()
        prompt = render_prompt(ctx)
        clear_manifest(worktree)
        (worktree / USAGE_RELPATH).unlink(missing_ok=True)
        self.last_usage = zero_usage()
        done = jail.run(self.argv, ctx, self.settings, input_text=prompt, timeout_s=self.timeout_s)
        self.last_usage = self._read_usage(worktree)
        if done.returncode != 0:
            last = next((line.strip() for line in reversed((done.stderr or done.stdout or "").splitlines()) if line.strip()), "")
            raise AgentError(f"agent command {self.argv[0]!r} exited with status {done.returncode}" + (f": {last}" if last else ""))
        manifest = read_manifest(worktree, agent="command")
        if manifest is None:
            return None
        return Proposal(manifest=manifest, usage=dict(self.last_usage), notes=[f"command {self.argv[0]} exited 0"])


BACKEND = CommandAgent  # evo.agent.base.get_agent looks it up by module name
