"""A candidate intervention the heuristic weighs: the files it would write and its manifest.

Shared by the policy side (`evo.agent.heuristic`) and the harness side
(`evo.agent.revisions`), together with the checks both apply: never retry a
refuted change, never repeat one already on the path from v0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evo.agent.conditions import term_added
from evo.agent.memory import interventions_on_path, negative_evidence, tried_on_path
from evo.recipe import get_path
from evo.yamlio import dump_yaml

SEVERITY_WEIGHT = {"info": 0.25, "warning": 0.5, "critical": 1.0}


@dataclass
class Candidate:
    manifest: dict
    writes: dict[str, str]  # worktree-relative path -> new text
    strength: float = 0.0
    reason: str = ""  # why it was chosen, for Proposal.notes


@dataclass
class Blocklist:
    """What may not be proposed: refuted changes (memory, lineage, negative-evidence skills) and changes already on the path."""

    refuted: dict[tuple, str] = field(default_factory=dict)  # (factor, change) -> why
    tried: set[tuple] = field(default_factory=set)
    siblings: dict[tuple, str] = field(default_factory=dict)  # (factor, change) -> version tried from the same parent
    retested: set[tuple] = field(default_factory=set)  # sibling changes already re-tested after a harness revision
    harness_revised: bool = False
    refuted_terms: list[tuple[dict, str]] = field(default_factory=list)  # (term pattern, who refutes it)

    @classmethod
    def from_context(cls, ctx) -> "Blocklist":
        block = cls()
        remembered = list(getattr(ctx.memory, "negative", None) or [])
        if ctx.lineage:
            # The lineage is the source of truth; memory's lineage-derived lines are a cache that may lag a step.
            remembered = [e for e in remembered if e.get("source") != "lineage"]
        entries = remembered + negative_evidence(ctx.lineage or [])
        for e in entries:
            block.refuted[(e.get("factor"), e.get("change"))] = (
                f"refuted by {', '.join(map(str, e.get('outcomes', []) or ['negative evidence']))} in {', '.join(e.get('versions', []) or ['memory'])}")
        block.tried = tried_on_path(ctx.lineage or [], ctx.parent)
        block.harness_revised = bool(ctx.harness_revised)
        # Same parent, same change: a duplicate, unless the harness (e.g. eval.k) changed since, which makes
        # it a re-test. One re-test per change: a sibling that already was one (or the loop's measuring it
        # again under more seeds, `remeasures`) blocks it for good.
        for s in ctx.lineage or []:
            if (s.get("parents") or [None])[0] != ctx.parent or s.get("name") == ctx.version:
                continue
            for m in (s.get("intervention"), s.get("harness_revision")):
                if m:
                    key = (m.get("factor"), m.get("change"))
                    block.siblings[key] = s["name"]
                    if m is s.get("intervention") and (s.get("harness_revision") or m.get("remeasures")):
                        block.retested.add(key)
        repaired: dict[str, str] = {}  # repair skill -> the newest version on the path it made
        for version, m in interventions_on_path(ctx.lineage or [], ctx.parent):
            repaired.setdefault(m.get("skill"), version)
        for skill in ctx.skills or []:
            for pattern in skill.refutes:
                if pattern.get("path") == "reward.terms" and pattern.get("term"):
                    block.refuted_terms.append((pattern["term"], f"the negative-evidence skill {skill.name} refutes"))
            if skill.repair and skill.name in repaired:  # what a repair on the path removed stays removed
                for op in skill.patch:
                    if op.get("op") == "drop_term":
                        pattern = op["value"] if isinstance(op["value"], dict) else {"name": op["value"]}
                        block.refuted_terms.append((pattern, f"the repair {skill.name} removed in {repaired[skill.name]}"))
        return block

    def why_blocked(self, factor: str, change: str, before: dict | None = None, after: dict | None = None) -> str | None:
        if (factor, change) in self.refuted:
            return self.refuted[(factor, change)]
        if (factor, change) in self.tried:
            return "already tried on the path from v0"
        if (factor, change) in self.siblings and (not self.harness_revised or (factor, change) in self.retested):
            again = " and re-tested" if (factor, change) in self.retested else ""
            return f"already tried{again} from the same parent in {self.siblings[(factor, change)]}"
        if before is not None and after is not None:
            for pattern, who in self.refuted_terms:
                if term_added(before, after, pattern):
                    return f"adds a reward term {who} ({pattern})"
        return None


def recipe_text(raw: dict, original_text: str) -> str:
    """Dump `raw` as YAML, keeping the original file's leading comment block (PyYAML drops comments)."""
    header = []
    for line in original_text.splitlines():
        if line.startswith("#") or (not line.strip() and header):
            header.append(line)
        else:
            break
    head = "\n".join(header).rstrip()
    return (head + "\n" if head else "") + dump_yaml(raw)


def _tokens_per_step(recipe: dict) -> float:
    """A step's generation budget, every prompt batch dynamic sampling may draw included (as `evo.train.cost`)."""
    from evo.train.filters import FilterConfig

    batches = FilterConfig.from_recipe(recipe.get("filters")).generation_batches
    return (get_path(recipe, "rollout.prompts_per_step", 1) * get_path(recipe, "rollout.num_generations", 1)
            * get_path(recipe, "rollout.max_new_tokens", 1) * batches)


def expected_cost(before: dict, after: dict) -> str:
    """Relative cost against the parent, from the recipe's token budget (an upper bound: generation may stop early)."""
    train = (_tokens_per_step(after) * get_path(after, "grpo.steps", 1) * get_path(after, "grpo.num_iterations", 1)) / max(
        _tokens_per_step(before) * get_path(before, "grpo.steps", 1) * get_path(before, "grpo.num_iterations", 1), 1)
    evals = (get_path(after, "eval.k", 1) * get_path(after, "rollout.max_new_tokens", 1)) / max(
        get_path(before, "eval.k", 1) * get_path(before, "rollout.max_new_tokens", 1), 1)
    if abs(train - 1) < 1e-9 and abs(evals - 1) < 1e-9:
        return "about the parent's cost (same token budget)"
    parts = []
    if abs(train - 1) >= 1e-9:
        parts.append(f"training token budget x{train:.2g} of the parent")
    if abs(evals - 1) >= 1e-9:
        parts.append(f"evaluation token budget x{evals:.2g}")
    return "; ".join(parts)


def evidence_text(used: dict, triggers_src: list[dict], cited: list[dict]) -> str:
    """`behavior/truncated_frac = 0.62 (> 0.05); finding behavior.truncation (warning): ...`."""
    thresholds = {}

    def walk(conds):
        for c in conds:
            if "any" in c or "all" in c:
                walk(c.get("any") or c.get("all"))
            else:
                thresholds.setdefault(c["metric"], f"{c['op']} {c['value']}")

    walk(triggers_src)
    parts = [f"{k} = {v:.4g} ({thresholds.get(k, 'measured')})" for k, v in sorted(used.items())]
    parts += [f"finding {f['id']} ({f.get('severity', 'info')}): {f.get('message', '')}".rstrip(": ") for f in cited]
    return "; ".join(parts)
