"""Render the trainer prompts an LLM agent is given.

The prompt is `diagnose.md` followed by `propose.md` (or `reflect.md` when the
last outcome was mixed / insufficient), read from the workspace's
`trainer_prompts/` and, for a file the workspace lacks, from the built-ins.
They are `string.Template` texts: `$diagnosis`, `${memory}`; `$$` is a literal
dollar. An unknown placeholder, or a prompt set without `$diagnosis` and
`$manifest_format`, is a one-line AgentError naming the file.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

from evo.agent.manifest import MANIFEST_RELPATH
from evo.agent.memory import render_lineage
from evo.agent.recipe_diff import format_value
from evo.errors import AgentError
from evo.resources import resource_dir
from evo.yamlio import dump_yaml

PROMPTS_DIR = "trainer_prompts"
REQUIRED = ("diagnosis", "manifest_format")
MAX_METRICS = 150

MANIFEST_FORMAT = f"""Write exactly one JSON object to `{MANIFEST_RELPATH}` (inside the worktree; git ignores `.evo/`):

{{
  "kind": "policy",                       // "policy" (recipe.yaml training settings) or "harness" (analyzers/, eval.*, prompts)
  "factor": "rollout.max_new_tokens",     // the ONE thing changed: a recipe dotted key, or a file such as analyzers/my_check.py
  "change": "rollout.max_new_tokens: 4 → 8",
  "hypothesis": "why this should help, citing the evidence below",
  "evidence": {{"findings": ["behavior.truncation"], "metrics": {{"behavior/truncated_frac": 0.62}}}},
  "predicted_effect": "what will move, which way, roughly how much",
  "expected_cost": "training token budget x2 of the parent",
  "skill": "raise-generation-length",     // optional: the skill you applied
  "backtest": {{"reward": {{"terms": [...]}}}},  // optional, reward/filter changes: the nested patch to replay on stored rollouts
  "exploration": "..."                    // only when no trigger fired and you try the lever anyway: why
}}

(No comments in the real file.) If nothing is warranted, write {{"kind": "none", "reason": "..."}} and change no file.
The orchestrator rejects the candidate if the diff touches more than the declared factor (skills/ and memory/
notes aside), a path outside the allowed ones, or leaves an invalid recipe.yaml."""


def diagnosis_digest(diagnosis: dict) -> str:
    """The diagnosis as compact text: metrics, findings with their evidence rows, audits, analyzer errors."""
    lines = [f"Diagnosis of {diagnosis.get('version', '?')} (harness {diagnosis.get('harness_version', '?')})"]
    metrics = diagnosis.get("metrics") or {}
    lines.append(f"Metrics ({len(metrics)}):")
    for key in sorted(metrics)[:MAX_METRICS]:
        value = metrics[key]
        lines.append(f"  {key} = {value:.4g}" if isinstance(value, float) else f"  {key} = {value}")
    if len(metrics) > MAX_METRICS:
        lines.append(f"  ... {len(metrics) - MAX_METRICS} more in diagnosis.json")
    findings = diagnosis.get("findings") or []
    lines.append(f"Findings ({len(findings)}):" if findings else "Findings: none")
    order = {"critical": 0, "warning": 1, "info": 2}
    for f in sorted(findings, key=lambda f: (order.get(f.get("severity"), 3), f.get("id", ""))):
        rows = (f.get("evidence") or {}).get("rows") or []
        lines.append(f"  - [{f.get('severity', 'info')}] {f.get('id')}: {f.get('message', '')}"
                     + (f" (rows: {', '.join(map(str, rows[:5]))})" if rows else ""))
    audits = diagnosis.get("audits") or {}
    if audits.get("vetoed"):
        for v in audits.get("vetoes") or []:
            lines.append(f"Audit veto ({v.get('audit')}): {v.get('message', '')}")
    broken = [a for a in diagnosis.get("analyzers") or [] if a.get("status") == "error"]
    for a in broken:
        lines.append(f"Analyzer error ({a.get('name')}): {a.get('error')}")
    return "\n".join(lines)


def skills_digest(skills: list) -> str:
    lines = []
    for s in skills:
        rec = s.record()
        head = (f"- {s.name} ({s.kind}; used {rec['uses']}x, {rec['wins']} wins, {rec['losses']} losses"
                + (f", in {', '.join(rec['domains'])}" if rec["domains"] else "") + f"): {s.description}")
        lines.append(head)
        if s.triggers:
            lines.append(f"    triggers: {json.dumps(s.triggers)}")
        if s.patch:
            lines.append(f"    patch: {json.dumps(s.patch)}")
        if s.repair and any(op.get("op") == "drop_term" for op in s.patch):
            lines.append(f"    repair: undoes {json.dumps(s.requires)}; the version then trains from the last policy "
                         "trained without it (the base model when v0 had it), not from the parent")
        elif s.repair:
            lines.append("    repair: reverses a setting the diagnosis shows harming the policy; proposed before all "
                         "but budget skills, since the rest of the evidence was measured on the harmed policy")
        if s.refutes:
            lines.append(f"    REFUTED (never do this): {json.dumps(s.refutes)}")
        if s.analyzer:
            lines.append(f"    installs analyzers/{s.analyzer}.py from {s.path.parent / 'skill.py' if s.path else 'skill.py'}")
    return "\n".join(lines) or "(no skills)"


def outcome_digest(last: dict | None) -> str:
    if not last:
        return "none yet (the parent is the baseline or was never judged)"
    h = last.get("headline") or {}
    text = f"{last.get('version', 'the parent')}: {last.get('outcome', '?')}"
    if h:
        text += f"; {h.get('metric', 'score')} = {format_value(h.get('value'))}, delta {format_value(h.get('delta'))}"
        if h.get("ci_low") is not None:
            text += f" [{h['ci_low']:+.4g}, {h['ci_high']:+.4g}]"
    return text


def _recipe_text(ctx) -> str:
    """The worktree's recipe.yaml as written (short, with its comments); the normalised dict otherwise."""
    path = Path(ctx.worktree) / "recipe.yaml" if ctx.worktree else None
    if path is not None and path.exists():
        return path.read_text(encoding="utf-8").rstrip()
    return dump_yaml(ctx.recipe).rstrip()


def _placeholders(ctx) -> dict[str, str]:
    paths = ctx.settings.get("paths", {})
    memory = ctx.memory.digest(include_lineage=False) if ctx.memory is not None else "(no memory loaded)"
    return {
        "version": ctx.version, "parent": ctx.parent, "domain": ctx.domain, "phase": ctx.phase,
        "worktree": str(ctx.worktree),
        "diagnosis": diagnosis_digest(ctx.diagnosis or {}),
        "recipe": _recipe_text(ctx),
        "last_outcome": outcome_digest(ctx.last_outcome),
        "memory": memory,
        "skills": skills_digest(ctx.skills or []),
        "lineage": render_lineage(ctx.lineage or [], title=False).rstrip(),
        "allowed_paths": ", ".join(paths.get("allowed", [])),
        "protected_paths": ", ".join(paths.get("protected", [])),
        "manifest_format": MANIFEST_FORMAT,
        "manifest_path": MANIFEST_RELPATH,
        "plateau": ctx.plateau or "(no plateau measured)",
        "harness_note": ("The harness was revised in this step and the parent re-diagnosed: the diagnosis above is the "
                         "new one. Propose one policy intervention now, or none; do not revise the harness again."
                         if ctx.harness_revised else ""),
    }


def _prompt_file(root: Path | None, name: str) -> Path:
    if root is not None and (Path(root) / PROMPTS_DIR / name).exists():
        return Path(root) / PROMPTS_DIR / name
    return resource_dir("trainer_prompts") / name


def render_prompt(ctx, *, root: str | Path | None = None) -> str:
    """diagnose.md + the phase's task (propose.md, reflect.md or explore.md) from `root` (default ctx.root), filled
    from `ctx`."""
    root = Path(root) if root is not None else (Path(ctx.root) if ctx.root else None)
    names = ["diagnose.md", {"reflect": "reflect.md", "explore": "explore.md"}.get(ctx.phase, "propose.md")]
    values = _placeholders(ctx)
    parts, used = [], set()
    for name in names:
        path = _prompt_file(root, name)
        template = string.Template(path.read_text(encoding="utf-8"))
        for match in template.pattern.finditer(template.template):
            key = match.group("named") or match.group("braced")
            if match.group("invalid") is not None:
                line = template.template[: match.start()].count("\n") + 1
                raise AgentError(f"{path}: line {line}: a lone '$' is not a placeholder; write $$ for a dollar sign")
            if key and key not in values:
                raise AgentError(f"{path}: unknown placeholder ${key}; use one of {', '.join('$' + k for k in sorted(values))}")
            if key:
                used.add(key)
        parts.append(template.substitute(values).strip())
    lacking = [k for k in REQUIRED if k not in used]
    if lacking:
        raise AgentError(f"{' + '.join(names)} in {root or 'the built-ins'}: the prompts never use ${lacking[0]}; "
                         "the agent needs it, so add it to one of them")
    return "\n\n".join(parts) + "\n"
