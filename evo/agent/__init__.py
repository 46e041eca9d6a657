"""Trainer agents: heuristic (offline default), claude (claude-agent-sdk), command (any agent CLI).

    from evo.agent import get_agent, AgentContext, Proposal
    agent = get_agent(settings, backend=None)
    proposal = agent.propose(ctx)          # Proposal(manifest, usage) or None

Also here: the candidate guard (`evo.agent.guard`), skills (`evo.agent.skills`),
memory (`evo.agent.memory`) and prompts (`evo.agent.prompts`). See docs/agents.md.
"""

from evo.agent.base import BACKENDS, AgentContext, Proposal, get_agent, zero_usage

__all__ = ["BACKENDS", "AgentContext", "Proposal", "get_agent", "zero_usage"]
