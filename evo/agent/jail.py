"""Where a command or claude agent runs: its worktree writable, the workspace read-only, nothing else.

The trainer agent is not trusted (DESIGN.md, "Trust boundaries"). Each
`command` run, and each Claude Code CLI the claude backend starts, lives in a
bubblewrap jail (`evo.confine`):

- the candidate's worktree writable (its `.evo/` scratch holds the manifest
  and the agent's HOME), everything else of the workspace read-only — main's
  checkout, `.git`, the artifacts — and the step journal and lock hidden;
- nothing else of the host: no home folder, no other users' files, only the
  system folders and the interpreter (plus `agent.sandbox.read_only`);
- exactly the environment variables `agent.env` names, plus the EVO_* ones;
- a process cap (`agent.sandbox.max_processes`), the `agent.timeout_s` wall
  clock (everything it started is killed with it), network only with
  `agent.sandbox.network` (LLM agents call their API).

`agent.sandbox.confine: false` runs the agent unconfined — still with the
scrubbed environment. Either way the orchestrator checks afterwards that
nothing outside the worktree changed (`evo.loop.tamper`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from evo.errors import AgentError

BASE_ENV = {"LANG": "C.UTF-8", "TERM": "dumb", "PATH": "/usr/local/bin:/usr/bin:/bin"}
PRLIMIT = "/usr/bin/prlimit"
DOMAIN_DATA = Path(__file__).resolve().parents[1] / "data" / "domains"  # the shipped task splits, validation included


@dataclass
class Launch:
    """How to start the agent: the argv (wrapped in its jail or not) and the environment it gets."""

    argv: list[str]
    env: dict
    jail: object | None  # evo.confine.Jail, or None when unconfined


def agent_env(ctx, settings: dict) -> dict:
    """The agent's whole environment: the basics, the names `agent.env` lists, the EVO_* context."""
    worktree = Path(ctx.worktree).resolve()
    home = worktree / ".evo" / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {**BASE_ENV, "HOME": str(home), "TMPDIR": "/tmp"}
    for name in (settings.get("agent") or {}).get("env") or []:
        if name in os.environ:
            env[name] = os.environ[name]
    env.update({"EVO_WORKTREE": str(worktree), "EVO_VERSION": ctx.version, "EVO_PARENT": ctx.parent,
                "EVO_PHASE": ctx.phase, "EVO_MANIFEST": str(worktree / ".evo" / "manifest.json")})
    return env


def _sandbox(settings: dict) -> dict:
    return {"confine": True, "network": True, "read_only": [], "max_processes": 512,
            **((settings.get("agent") or {}).get("sandbox") or {})}


def launch(argv: list[str], ctx, settings: dict) -> Launch:
    """The agent's argv inside its jail (or unconfined, as evo.yaml says)."""
    from evo import confine

    sandbox = _sandbox(settings)
    env = agent_env(ctx, settings)
    limited = ([PRLIMIT, f"--nproc={int(sandbox['max_processes'])}", "--core=0", "--"] + list(argv)
               if Path(PRLIMIT).exists() else list(argv))
    if not sandbox["confine"]:
        return Launch(list(argv), env, None)
    if not confine.available():
        raise AgentError("the agent must run confined but bubblewrap cannot build a jail here; install it "
                         "(`apt-get install bubblewrap`) or set evo.yaml agent.sandbox.confine: false to run the agent "
                         "unconfined (the orchestrator still checks what it changed)")
    root, worktree = Path(ctx.root).resolve(), Path(ctx.worktree).resolve()
    program = shutil.which(argv[0], path=env["PATH"]) or argv[0]
    extra = [str(Path(p).expanduser().resolve()) for p in sandbox["read_only"]]
    if Path(program).is_absolute() and not str(program).startswith(("/usr/", "/bin/")):
        extra.append(str(Path(program).resolve().parent))
    jail = confine.Jail(
        read_only=tuple(dict.fromkeys([str(root), *extra])),
        writable=(str(worktree),),
        hidden=(str(root / ".evo" / "journal"), str(root / ".evo" / "lock"), str(DOMAIN_DATA)),
        # Not uid 65534: the worktree and the workspace are the user's files, often in 0700 folders. The
        # user namespace keeps the caller's uid without a single capability; the mounts do the confining.
        python=True, site_packages=True, network=bool(sandbox["network"]), unprivileged=False,
        env=env, cwd=str(worktree), tmp_mb=512,
    )
    return Launch(limited, env, jail)


def run(argv: list[str], ctx, settings: dict, *, input_text: str, timeout_s: float) -> subprocess.CompletedProcess:
    """Run the agent to completion in its jail; raises AgentError on a missing program or the time limit."""
    from evo import confine

    spec = launch(argv, ctx, settings)
    if shutil.which(argv[0], path=spec.env["PATH"]) is None and not Path(argv[0]).is_file():
        raise AgentError(f"agent command {argv[0]!r} not found; check evo.yaml agent.command")
    worktree = Path(ctx.worktree).resolve()
    kwargs = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if spec.jail is not None:
            proc = confine.popen(spec.argv, spec.jail, **kwargs)
        else:
            proc = subprocess.Popen(spec.argv, cwd=worktree, env=spec.env, start_new_session=True, **kwargs)
    except FileNotFoundError:
        raise AgentError(f"agent command {argv[0]!r} not found; check evo.yaml agent.command") from None
    try:
        out, err = proc.communicate(input_text, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc, spec)
        raise AgentError(f"agent command {argv[0]!r} ran past agent.timeout_s = {timeout_s:g} s; "
                         "raise it in evo.yaml or give the agent a smaller task") from None
    if spec.jail is not None:
        confine.release(proc)
        if proc.returncode != 0 and "execvp" in (err or ""):
            raise AgentError(f"agent command {argv[0]!r} cannot start inside its jail ({err.strip().splitlines()[-1]}); "
                             "add its install folder to evo.yaml agent.sandbox.read_only")
    return subprocess.CompletedProcess(spec.argv, proc.returncode, out, err)


def _kill(proc, spec: Launch) -> None:
    from evo import confine

    if spec.jail is not None:
        confine.kill(proc)
        return
    try:
        os.killpg(proc.pid, 9)
    except OSError:
        pass
    proc.wait()


def jailed_cli(real_cli: str, ctx, settings: dict, folder: Path) -> Path:
    """An executable that starts `real_cli` (the Claude Code CLI) in the agent's jail.

    claude-agent-sdk starts the CLI itself (`cli_path`) and talks to it over
    stdin/stdout; this stand-in passes those through to the jailed CLI, so the
    SDK and its hooks run in the orchestrator while the CLI, which runs the
    tools, is confined. The jail spec goes in a private file beside it.
    """
    spec = launch([real_cli], ctx, settings)
    if spec.jail is None:
        return Path(real_cli)
    folder.mkdir(parents=True, exist_ok=True)
    spec_file = folder / "jail.json"
    spec_file.write_text(json.dumps({"argv": spec.argv, "jail": _jail_dict(spec.jail)}))
    spec_file.chmod(0o600)
    wrapper = folder / "claude"
    wrapper.write_text(f"#!{sys.executable} -I\nimport sys\nfrom evo.agent.jail import _exec_jailed\n"
                       f"sys.exit(_exec_jailed({str(spec_file)!r}, sys.argv[1:]))\n")
    wrapper.chmod(0o700)
    return wrapper


def _jail_dict(jail) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else dict(v) if k == "env" else v) for k, v in jail.__dict__.items()}


def _exec_jailed(spec_file: str, args: list[str]) -> int:
    """Run by the stand-in CLI: the jailed CLI with the SDK's arguments, stdio passed through."""
    from evo import confine

    spec = json.loads(Path(spec_file).read_text())
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["jail"].items()}
    # What the SDK sets for its CLI (entry point, protocol flags) travels in; nothing else of its environment.
    sdk_env = {k: v for k, v in os.environ.items() if k.startswith("CLAUDE_CODE_") or k in ("CLAUDECODE", "CLAUDE_AGENT_SDK_VERSION")}
    fields["env"] = {**sdk_env, **fields["env"]}
    jail = confine.Jail(**fields)
    proc = confine.popen(spec["argv"] + list(args), jail)
    try:
        proc.wait()
    except KeyboardInterrupt:
        confine.kill(proc)
    finally:
        confine.release(proc)
    return proc.returncode or 0
