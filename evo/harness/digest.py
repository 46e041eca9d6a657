"""The short markdown digest of a diagnosis (diagnosis.md), for humans and agents.

It leads with what decides the next step: the headline score, the comparison
with the parent, vetoes, then findings by severity. Everything else stays in
diagnosis.json.
"""

from __future__ import annotations

SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
KEY_METRICS = (
    "score/avg_at_k", "score/pass_at_k", "signal/dead_group_ratio", "signal/midband_mass", "signal/answer_diversity",
    "signal/reward_spread", "behavior/truncated_frac", "behavior/train_truncated_frac", "behavior/length_p90",
    "behavior/turns_mean", "behavior/echo_trap_frac", "behavior/format_fail_frac", "behavior/tool_use_frac",
)
MAX_FINDINGS = 12


def _num(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def headline(diag: dict) -> str:
    m = diag.get("metrics", {})
    parts = []
    if "score/avg_at_k" in m:
        strata = sorted(k.rsplit("/", 1)[1] for k in m if k.startswith("score/avg_at_k/"))
        detail = ", ".join(f"{s} {m['score/avg_at_k/' + s]:.3f}" for s in strata) if len(strata) > 1 else ""
        parts.append(f"Avg@{m.get('score/k', 'k')} {m['score/avg_at_k']:.3f}" + (f" ({detail})" if detail else ""))
    if "version/delta_vs_parent" in m:
        parts.append(
            f"vs parent {m['version/delta_vs_parent']:+.3f} [{m['version/ci_low_vs_parent']:+.3f}, "
            f"{m['version/ci_high_vs_parent']:+.3f}], p={m['version/p_value_vs_parent']:.3g}"
        )
    if diag.get("audits", {}).get("vetoed"):
        parts.append("VETOED by " + ", ".join(sorted({v["audit"] for v in diag["audits"]["vetoes"]})))
    return "; ".join(parts) or "no evaluation in this run"


def sorted_findings(diag: dict) -> list[dict]:
    return sorted(diag.get("findings", []), key=lambda f: (SEVERITY_RANK.get(f["severity"], 9), f["layer"], f["id"]))


def markdown(diag: dict) -> str:
    title = diag.get("version") or diag.get("run_dir", "run")
    lines = [f"# Diagnosis of {title} (harness {diag['harness_version']})", "", f"**Headline:** {headline(diag)}", ""]
    vetoes = diag.get("audits", {}).get("vetoes", [])
    if vetoes:
        lines += ["## Vetoes", ""]
        lines += [f"- **{v['audit']}**: {v['message']}" for v in vetoes]
        lines.append("")
    counts = diag.get("counts", {})
    findings = sorted_findings(diag)
    lines += [f"## Findings ({counts.get('critical', 0)} critical, {counts.get('warning', 0)} warning, {counts.get('info', 0)} info)", ""]
    for f in findings[:MAX_FINDINGS]:
        rows = f["evidence"]["rows"]
        cite = f" — e.g. {', '.join(rows[:3])}" if rows else ""
        lines.append(f"- [{f['severity']}] `{f['id']}`: {f['message']}{cite}")
    if len(findings) > MAX_FINDINGS:
        lines.append(f"- … {len(findings) - MAX_FINDINGS} more in diagnosis.json")
    if not findings:
        lines.append("- none")
    m = diag.get("metrics", {})
    shown = [k for k in KEY_METRICS if k in m]
    if shown:
        lines += ["", "## Key metrics", "", "| metric | value |", "|---|---|"]
        lines += [f"| `{k}` | {_num(m[k])} |" for k in shown]
    failed = [a for a in diag.get("analyzers", []) if a["status"] == "error"]
    if failed:
        lines += ["", "## Analyzer errors", ""]
        lines += [f"- `{a['name']}`: {a['error']}" for a in failed]
    return "\n".join(lines) + "\n"
