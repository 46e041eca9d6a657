"""The trainer-agent interface: one context in, one proposal (or None) out.

Every backend works in the candidate's git worktree (`ctx.worktree`), edits only
files there, and returns a `Proposal`: the intervention manifest plus what the
agent cost. The orchestrator, never the agent, runs git, writes notes and
checks the diff (`evo.agent.guard`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evo.errors import AgentError


def _backend_names() -> tuple[str, ...]:
    from evo.schemas import load_schema

    return tuple(load_schema("settings")["properties"]["agent"]["properties"]["backend"]["enum"])


# The backends are named once, in the settings schema (agent.backend); each lives in evo.agent.<name>,
# whose module-level BACKEND is its class. Adding one is a module and a name, no if-chain.
BACKENDS = _backend_names()


def zero_usage() -> dict:
    return {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "turns": 0}


@dataclass
class AgentContext:
    """What an agent sees. `phase` is a hint: "reflect" when the last outcome was mixed/insufficient; "explore"
    when nothing fired and the loop measured that continuing the parent stopped paying (`plateau` says how)."""

    phase: str
    root: Path
    worktree: Path
    version: str
    parent: str
    domain: str
    recipe: dict  # the parent's normalised recipe
    diagnosis: dict  # the parent's diagnosis.json
    settings: dict
    last_outcome: dict | None = None  # the last transition's `judged` event (+ "version"): outcome, headline {metric, value, delta, ci_low, ci_high}
    lineage: list[dict] = field(default_factory=list)  # name, parents, state, intervention, outcome, headline
    memory: Any = None  # evo.agent.memory.Memory
    skills: list = field(default_factory=list)  # evo.agent.skills.Skill
    harness_revised: bool = False  # second call of a step: the harness was revised and the parent re-diagnosed
    plateau: str | None = None  # phase "explore": the loop's measured plateau (or measuring limit), in words


@dataclass
class Proposal:
    """An agent's answer. `notes` say how it chose; `denied` lists tool calls its guard refused."""

    manifest: dict
    usage: dict = field(default_factory=zero_usage)
    notes: list[str] = field(default_factory=list)
    denied: list[str] = field(default_factory=list)


class Agent(Protocol):
    name: str
    last_usage: dict  # what the last propose() cost, also when it returned None

    def propose(self, ctx: AgentContext) -> Proposal | None: ...


def get_agent(settings: dict, backend: str | None = None) -> Agent:
    """The backend named by `backend` or `settings["agent"]["backend"]` (heuristic by default)."""
    import importlib

    name = backend or settings.get("agent", {}).get("backend") or "heuristic"
    if name not in BACKENDS:
        raise AgentError(f"unknown agent backend {name!r}; use one of {', '.join(BACKENDS)} (evo.yaml agent.backend or --agent)")
    return importlib.import_module(f"evo.agent.{name}").BACKEND(settings)
