"""What one `evo step` did, and its greppable summary block."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class StepReport:
    status: str  # done | awaiting-approval | nothing-to-do | rejected | dry-run
    version: str = ""
    parents: list[str] = field(default_factory=list)
    intervention: str = ""
    harness_revision: str = ""
    backtest: str = ""
    estimate: dict = field(default_factory=dict)
    outcome: str = ""
    headline: dict = field(default_factory=dict)
    decision: str = ""
    reason: str = ""
    bootstrapped: dict | None = None  # set when this step first trained v0
    message: str = ""

    def describe_proposal(self, manifests: list[dict]) -> bool:
        """Fill `intervention` (and `harness_revision`) from the agent's manifests; True if harness-only."""
        self.intervention = describe(manifests[-1])
        if len(manifests) > 1:
            self.harness_revision = describe(manifests[0])
        return all(m.get("kind") == "harness" for m in manifests)

    def as_dict(self) -> dict:
        return asdict(self)

    def summary_block(self) -> str:
        """A `key: value` block that ends every step (grep-friendly, like autoresearch)."""
        lines = ["--- evo step summary ---"]
        if self.bootstrapped:
            b = self.bootstrapped
            judged = b.get("judged") or {}
            lines.append(f"bootstrap: v0 trained; {_headline(judged.get('headline') or {})}; "
                         f"outcome vs base: {judged.get('outcome', '?')}")
        lines += [
            f"status: {self.status}",
            f"version: {self.version or '-'}",
            f"parent: {', '.join(self.parents) or '-'}",
            f"intervention: {self.intervention or '-'}",
        ]
        if self.harness_revision:
            lines.append(f"harness_revision: {self.harness_revision}")
        lines.append(f"backtest: {self.backtest or '-'}")
        if self.estimate:
            lines.append(
                f"estimate: {self.estimate.get('tokens_generated', 0):,} tokens generated, "
                f"{self.estimate.get('tokens_trained', 0):,} trained, {self.estimate.get('gpu_hours', 0):.4f} GPU-h"
            )
        lines += [
            f"outcome: {self.outcome or '-'}",
            f"headline: {_headline(self.headline) if self.headline else '-'}",
            f"decision: {self.decision or '-'}" + (f" ({self.reason})" if self.reason else ""),
        ]
        if self.message:
            lines.append(f"note: {self.message}")
        return "\n".join(lines)


def describe(manifest: dict | None) -> str:
    """`[kind] change (skill name)`, e.g. `[policy] rollout.max_new_tokens: 4 → 8 (skill raise-generation-length)`."""
    if not manifest:
        return ""
    factor, change = str(manifest.get("factor", "?")), str(manifest.get("change") or "")
    text = change if change.startswith(factor) else f"{factor}: {change}" if change else factor
    skill = manifest.get("skill")
    if skill and f"skill {skill}" not in text:
        text += f" (skill {skill})"
    return f"[{manifest.get('kind', '?')}] {text}"


def _headline(h: dict) -> str:
    if not h:
        return "-"
    text = f"{h.get('metric', 'score/avg_at_k')} {h.get('value', float('nan')):.4f}"
    if h.get("delta") is not None:
        text += (
            f" (delta {h['delta']:+.4f}, 95% CI [{h.get('ci_low', float('nan')):+.4f}, "
            f"{h.get('ci_high', float('nan')):+.4f}]"
        )
        if h.get("p_value") is not None:
            text += f", p={h['p_value']:.3g}"
        text += ")"
    return text
