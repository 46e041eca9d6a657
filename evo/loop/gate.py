"""Cost gate and workspace budgets.

A step's cost is estimated from the recipes of every run it trains (the
candidate under each training seed, the counterfactual control runs not yet
trained for its parent, v0's calibration replicates), in tokens to generate
and to train, and converted to GPU-hours with the workspace's rate
(`gate.gpu_hours_per_million_tokens`). Above `gate.approval_above_gpu_hours`
the version waits in `awaiting-approval` until `evo approve vN` (or a CI
label that runs it). Budgets (`budget.*` in evo.yaml) stop the loop before a
step starts, with the figure that ran out and the key that raises it.
"""

from __future__ import annotations

from dataclasses import dataclass

from evo.errors import EvoError
from evo.settings import Budget, Gate


class BudgetExceeded(EvoError):
    """A workspace budget in evo.yaml is spent."""


@dataclass
class CostEstimate:
    tokens_generated: int
    tokens_trained: int
    gpu_hours: float

    def as_dict(self) -> dict:
        return {
            "tokens_generated": self.tokens_generated,
            "tokens_trained": self.tokens_trained,
            "gpu_hours": round(self.gpu_hours, 6),
        }


def estimate(recipe: dict, gate: Gate, *, train: bool = True) -> CostEstimate:
    """Estimate the cost of running `recipe` (training + evaluation)."""
    from evo.train.cost import estimate_cost

    raw = estimate_cost(recipe)
    generated = int(raw.get("tokens_generated", 0))
    trained = int(raw.get("tokens_trained", 0))
    if not train:
        generated = int(raw.get("eval_tokens_generated", 0))
        trained = 0
    rate = float(gate.gpu_hours_per_million_tokens)
    return CostEstimate(generated, trained, (generated + trained) / 1e6 * rate)


def estimate_runs(recipes: list[dict], gate: Gate, *, eval_recipe: dict | None = None) -> CostEstimate:
    """The cost of a step that trains each of `recipes` once (and, with `eval_recipe`, evaluates without training)."""
    parts = [estimate(r, gate) for r in recipes]
    if eval_recipe is not None:
        parts.append(estimate(eval_recipe, gate, train=False))
    generated = sum(p.tokens_generated for p in parts)
    trained = sum(p.tokens_trained for p in parts)
    return CostEstimate(generated, trained, sum(p.gpu_hours for p in parts))


def needs_approval(cost: CostEstimate, gate: Gate) -> bool:
    return cost.gpu_hours > float(gate.approval_above_gpu_hours)


TRAINING_EVENTS = ("trained", "replicated", "control")  # each carries the estimate of the one run it records


def spent(records: dict) -> dict:
    """What the workspace has spent so far, from lineage events (controls and seed replicates included)."""
    steps = gpu_hours = agent_tokens = grpo_steps = 0
    agent_cost = 0.0
    for rec in records.values():
        for ev in rec.events:
            kind = ev.get("event")
            if kind == "created" and ev.get("intervention"):
                steps += 1
                usage = ev.get("usage") or {}
                agent_tokens += int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
                agent_cost += float(usage.get("cost_usd", 0.0) or 0.0)
            elif kind in TRAINING_EVENTS:
                gpu_hours += float((ev.get("estimate") or {}).get("gpu_hours", 0.0))
                grpo_steps += int(ev.get("grpo_steps") or 0)
    return {"steps": steps, "gpu_hours": gpu_hours, "agent_tokens": agent_tokens, "agent_cost_usd": agent_cost,
            "grpo_steps": grpo_steps}


def check_budgets(records: dict, budget: Budget) -> dict:
    """Raise BudgetExceeded when any budget in evo.yaml is spent; return what is spent."""
    used = spent(records)
    limits = (
        ("max_steps", "steps", "steps taken"),
        ("max_gpu_hours", "gpu_hours", "estimated GPU-hours trained"),
        ("max_agent_tokens", "agent_tokens", "agent tokens used"),
        ("max_agent_cost_usd", "agent_cost_usd", "agent cost in USD"),
    )
    for key, field, what in limits:
        limit = getattr(budget, key)
        if limit is not None and used[field] >= limit:
            raise BudgetExceeded(
                f"evo.yaml: budget.{key} is spent ({used[field]:g} {what} of {limit:g}); "
                f"raise budget.{key} to continue"
            )
    return used
