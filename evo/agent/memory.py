"""Persistent memory under the workspace's `memory/`: what the loop has learned so far.

    lineage.md               a digest of every version, regenerated each step from the lineage notes
    recurring_cases.md       findings that recur across versions, with counts
    negative_evidence.md     refuted interventions (judged a regression, or judged and pruned), for people and prompts
    negative_evidence.jsonl  the same, one JSON object a line, for the heuristic (`source: manual` lines are kept)
    search_notes.md          append-only notes: one line per judged version, plus anything a person adds

The lineage notes are the source of truth; everything here except the search
notes and manual negative-evidence lines is regenerated from them, so running
`update_memory` twice (a resumed step) changes nothing the second time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from evo.errors import AgentError
from evo.vocabulary import Headline

MEMORY_DIR = "memory"
REFUTING_OUTCOMES = ("regression",)
_SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


@dataclass
class Memory:
    lineage_md: str = ""
    recurring_md: str = ""
    negative: list[dict] = field(default_factory=list)  # {factor, change, versions, outcomes, kind, skill, source}
    search_notes_md: str = ""

    @classmethod
    def load(cls, root: str | Path) -> "Memory":
        """Read `<root>/memory/`; missing files read as empty (a fresh workspace has no memory yet)."""
        folder = Path(root) / MEMORY_DIR

        def read(name: str) -> str:
            path = folder / name
            return path.read_text(encoding="utf-8") if path.exists() else ""

        negative = []
        for lineno, line in enumerate(read("negative_evidence.jsonl").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                negative.append(json.loads(line))
            except json.JSONDecodeError:
                raise AgentError(f"{folder / 'negative_evidence.jsonl'}: line {lineno} is not JSON; fix or delete that line") from None
        return cls(read("lineage.md"), read("recurring_cases.md"), negative, read("search_notes.md"))

    def refuted(self, factor: str, change: str) -> dict | None:
        """The negative-evidence entry for exactly this factor and change, if any."""
        for entry in self.negative:
            if entry.get("factor") == factor and entry.get("change") == change:
                return entry
        return None

    def digest(self, limit: int = 6000, *, include_lineage: bool = True) -> str:
        """Memory as prompt text: negative evidence first (it must never be retried), then the rest."""
        parts = []
        if self.negative:
            parts.append("Refuted interventions (never retry these):\n" + "\n".join(
                f"- {e.get('kind', 'policy')} {e['change']} — {', '.join(e.get('outcomes', []))} in {', '.join(e.get('versions', []))}"
                for e in self.negative))
        for title, text in (("Lineage", self.lineage_md if include_lineage else ""), ("Recurring cases", self.recurring_md),
                            ("Search notes (latest)", "\n".join(self.search_notes_md.splitlines()[-20:]))):
            if text.strip():
                parts.append(f"{title}:\n{text.strip()}")
        out = "\n\n".join(parts) or "(memory is empty: this is the first step)"
        return out if len(out) <= limit else out[: limit - 20].rstrip() + "\n[... truncated]"


def _delta(h: dict) -> str:
    """`Δ +0.19 [+0.12, +0.26]` from a headline; "" when it has no delta."""
    return Headline.from_dict(h).delta_text()


def _headline(summary: dict) -> str:
    """The attributed figure, then progress against the parent where it differs: both verdicts a reader needs."""
    h = summary.get("headline") or {}
    if h.get("value") is None:
        return "—"
    delta = _delta(h)
    against = summary.get("against")
    text = f"{h.get('metric', 'score')} {h['value']:.4g}" + (f" ({delta}" + (f" vs {against}" if against else "") + ")" if delta else "")
    progress = summary.get("progress") or {}
    if progress and progress.get("against") != against:
        text += f"; vs {progress['against']}: {progress['outcome']} ({_delta(progress.get('headline') or {})})"
    if summary.get("confounded"):
        text += "; confounded: compared with the parent after extra training"
    return text


def _intervention(summary: dict) -> str:
    m = summary.get("intervention")
    if not m:
        return "baseline" if not summary.get("parents") else "—"
    text = f"{m.get('kind', '?')} {m.get('change', m.get('factor', '?'))}"
    if m.get("skill"):
        text += f" ({m['skill']})"
    rev = summary.get("harness_revision")
    if rev:
        text = f"harness {rev.get('change', rev.get('factor'))}, then " + text
    return text.replace("|", "\\|")


def render_lineage(lineage: list[dict], *, title: bool = True) -> str:
    lines = ["# Lineage digest", "", "_Regenerated by `evo step` from the lineage notes; edits here are overwritten._", ""] if title else []
    if not lineage:
        return "\n".join(lines + ["No versions yet."]) + "\n"
    promoted = [s["name"] for s in lineage if s.get("state") == "promoted"]
    if promoted:
        lines += [f"Promoted path: {' → '.join(promoted)}", ""]
    lines += ["| version | parents | state | intervention | outcome | headline |", "|---|---|---|---|---|---|"]
    for s in lineage:
        lines.append(f"| {s['name']} | {', '.join(s.get('parents') or []) or '—'} | {s.get('state') or '—'} | "
                     f"{_intervention(s)} | {s.get('outcome') or '—'} | {_headline(s)} |")
    return "\n".join(lines) + "\n"


def recurring_cases(diagnoses: dict[str, dict]) -> list[dict]:
    """Finding ids seen in two or more versions' diagnoses, most frequent first."""
    seen: dict[str, dict] = {}
    for version in sorted(diagnoses, key=_version_key):
        for f in diagnoses[version].get("findings", []) or []:
            fid = f.get("id")
            if not fid:
                continue
            case = seen.setdefault(fid, {"id": fid, "versions": [], "severity": "info", "message": ""})
            if version not in case["versions"]:
                case["versions"].append(version)
            if _SEVERITY_RANK.get(f.get("severity"), 0) >= _SEVERITY_RANK.get(case["severity"], 0):
                case["severity"] = f.get("severity", "info")
            case["message"] = f.get("message", "")  # the latest wording
    cases = [dict(c, count=len(c["versions"])) for c in seen.values() if len(c["versions"]) >= 2]
    return sorted(cases, key=lambda c: (-c["count"], c["id"]))


def render_recurring(cases: list[dict]) -> str:
    lines = ["# Recurring cases", "", "_Findings seen in two or more versions' diagnoses; regenerated each step._", ""]
    if not cases:
        lines.append("None yet.")
    for c in cases:
        lines.append(f"- **{c['id']}** ({c['severity']}) — {c['count']} versions: {', '.join(c['versions'])}. Latest: {c['message']}")
    return "\n".join(lines) + "\n"


def negative_evidence(lineage: list[dict]) -> list[dict]:
    """Interventions judged a regression, or judged and then pruned, grouped by factor + change.

    A version pruned before it was ever judged (the guard rejected its diff, a
    person rejected it at the gate) never produced evidence about its
    intervention, so it refutes nothing.
    """
    grouped: dict[tuple, dict] = {}
    for s in lineage:
        m = s.get("intervention")
        judged = s.get("outcome") is not None
        if not m or not (s.get("outcome") in REFUTING_OUTCOMES or (s.get("state") == "pruned" and judged)):
            continue
        key = (m.get("factor"), m.get("change"))
        entry = grouped.setdefault(key, {"factor": key[0], "change": key[1], "kind": m.get("kind", "policy"),
                                         "skill": m.get("skill"), "versions": [], "outcomes": [], "source": "lineage"})
        entry["versions"].append(s["name"])
        entry["outcomes"].append(s.get("outcome") or s.get("state"))
    return list(grouped.values())


def render_negative(entries: list[dict]) -> str:
    lines = ["# Negative evidence", "",
             "_Interventions judged a regression, or judged and pruned. The heuristic never retries one;",
             "LLM agents are shown this list. Regenerated each step (manual lines in negative_evidence.jsonl are kept)._", ""]
    if not entries:
        lines.append("None yet.")
    for e in entries:
        skill = f" (skill {e['skill']})" if e.get("skill") else ""
        lines.append(f"- {e.get('kind', 'policy')} `{e['change']}`{skill}: {', '.join(map(str, e.get('outcomes', [])))} "
                     f"in {', '.join(e.get('versions', []))}")
    return "\n".join(lines) + "\n"


def _version_key(name: str):
    return (0, int(name[1:])) if name[:1] == "v" and name[1:].isdigit() else (1, name)


def _note_line(s: dict) -> str:
    delta = _delta(s.get("headline") or {})
    delta = f", {delta}" + (f" vs {s['against']}" if s.get("against") else "") if delta else ""
    return f"- {s['name']} (from {', '.join(s.get('parents') or []) or '—'}): {_intervention(s)} → {s['outcome']}{delta} <!-- evo:{s['name']} -->"


def _write(path: Path, text: str, changed: list[str], root: Path) -> None:
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    changed.append(path.relative_to(root).as_posix())


def update_memory(root: str | Path, lineage: list[dict], diagnoses: dict[str, dict]) -> list[str]:
    """Regenerate the memory files from lineage summaries and diagnoses; return the paths (relative to root) it changed."""
    root = Path(root)
    folder = root / MEMORY_DIR
    changed: list[str] = []
    _write(folder / "lineage.md", render_lineage(lineage), changed, root)
    _write(folder / "recurring_cases.md", render_recurring(recurring_cases(diagnoses)), changed, root)

    manual = [e for e in Memory.load(root).negative if e.get("source") == "manual"]
    entries = negative_evidence(lineage) + manual
    _write(folder / "negative_evidence.md", render_negative(entries), changed, root)
    jsonl = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries)
    _write(folder / "negative_evidence.jsonl", jsonl, changed, root)

    notes_path = folder / "search_notes.md"
    notes = notes_path.read_text(encoding="utf-8") if notes_path.exists() else "# Search notes\n\n_Append-only: one line per judged version; add your own below._\n\n"
    new_lines = [_note_line(s) for s in lineage if s.get("outcome") and f"<!-- evo:{s['name']} -->" not in notes]
    if new_lines or not notes_path.exists():
        _write(notes_path, notes.rstrip("\n") + "\n" + "".join(line + "\n" for line in new_lines), changed, root)
    return changed


def interventions_on_path(lineage: list[dict], parent: str) -> list[tuple[str, dict]]:
    """(version, manifest) of every intervention and harness revision on the path from `parent` back to v0
    (following first parents), newest first."""
    by_name = {s["name"]: s for s in lineage}
    found: list[tuple[str, dict]] = []
    current, seen = parent, set()
    while current in by_name and current not in seen:
        seen.add(current)
        s = by_name[current]
        found += [(current, m) for m in (s.get("intervention"), s.get("harness_revision")) if m]
        current = (s.get("parents") or [None])[0]
    return found


def tried_on_path(lineage: list[dict], parent: str) -> set[tuple[str, str]]:
    """(factor, change) of every intervention on the path from v0 to `parent` (following first parents)."""
    return {(m.get("factor"), m.get("change")) for _, m in interventions_on_path(lineage, parent)}
