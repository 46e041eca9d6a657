"""What one `evo step` did, and its greppable summary block."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from evo.vocabulary import Headline


@dataclass
class StepReport:
    status: str  # done | awaiting-approval | nothing-to-do | rejected | dry-run
    version: str = ""
    parents: list[str] = field(default_factory=list)
    intervention: str = ""
    harness_revision: str = ""
    backtest: str = ""
    estimate: dict = field(default_factory=dict)
    outcome: str = ""  # the attributed outcome class (against the control, where there is one)
    headline: dict = field(default_factory=dict)  # the attributed comparison
    against: str = ""  # what `headline` compares with: control, a parent version, base
    progress: dict = field(default_factory=dict)  # {outcome, headline} against the parent
    confounded: bool = False  # no control: the figure includes the gain of the extra training steps
    plateau: dict | None = None  # nothing-to-do: the measurements that say the policy stopped learning
    decision: str = ""
    reason: str = ""
    bootstrapped: dict | None = None  # set when this step first trained v0
    message: str = ""

    def describe_proposal(self, manifests: list[dict]) -> str:
        """Fill `intervention` (and `harness_revision`) from the agent's manifests; returns the step's kind.

        `harness` when every manifest revises the harness, `continue` when the
        intervention continues the parent's recipe, else `policy`.
        """
        self.intervention = describe(manifests[-1])
        if len(manifests) > 1:
            self.harness_revision = describe(manifests[0])
        if all(m.get("kind") == "harness" for m in manifests):
            return "harness"
        return "continue" if manifests[-1].get("kind") == "continue" else "policy"

    def take_verdict(self, judged: dict) -> None:
        """Fill the outcome fields from a `judged` event (either schema)."""
        self.outcome, self.headline = judged["outcome"], judged.get("headline") or {}
        self.against = (judged.get("attributed") or {}).get("against") or judged.get("baseline") or ""
        progress = judged.get("progress")
        if progress and self.against != progress.get("against"):
            self.progress = {"against": progress["against"], "outcome": progress["outcome"],
                             "headline": progress.get("headline") or {}}
        self.confounded = bool(judged.get("confounded"))

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
            noise = judged.get("noise") or {}
            if noise.get("sigma") is not None:
                lines.append(f"noise floor: Avg@k seed-to-seed sigma {noise['sigma']:.4f} over {noise.get('runs', '?')} runs")
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
        against = f" vs {self.against}" if self.against else ""
        lines += [
            f"outcome: {self.outcome or '-'}" + (against if self.outcome else ""),
            f"headline: {_headline(self.headline) if self.headline else '-'}",
        ]
        if self.progress:
            lines.append(f"progress: {self.progress['outcome']} vs {self.progress['against']}; "
                         f"{_headline(self.progress['headline'])}")
        if self.confounded:
            lines.append("confounded: yes (search.control: none): the delta includes the gain of the extra training steps")
        if self.plateau:
            lines.append(f"plateau: {self.plateau.get('text', '-')}")
        lines.append(f"decision: {self.decision or '-'}" + (f" ({self.reason})" if self.reason else ""))
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
    if manifest.get("remeasures"):
        text += f", {manifest['remeasures']}'s change measured again under {manifest.get('seeds')} seeds"
    return f"[{manifest.get('kind', '?')}] {text}"


def _headline(h: dict) -> str:
    return Headline.from_dict(h).full() if h else "-"
