"""Skills: reusable interventions in the Agent Skills layout, with EvoTrainer fields.

A skill is a folder `skills/<name>/` holding `SKILL.md` (YAML front matter +
markdown a coding agent reads) and, for harness skills, `skill.py` (an analyzer
to install into `analyzers/`). Front matter:

    name, description          Agent Skills fields (name must equal the folder name)
    kind                       policy | harness | continue (train the parent's recipe further; triggers only, no patch)
    triggers                   conditions on diagnostic metrics, all must hold ({any: [...]} for alternatives)
    requires                   conditions on the parent's recipe (has_term, lacks_term, <, ==, ...)
    patch                      recipe operations: set, scale, add_term, drop_term, enable
    domains                    where it applies ("*" = any)
    findings                   diagnosis finding ids it answers (cited as evidence)
    budget                     true: it raises a limit of the episode (tokens, turns, tools) the diagnosis shows binding;
                               the heuristic proposes a firing budget skill before any other (evo.agent.heuristic)
    repair                     true: it reverses a recipe setting the diagnosis shows harming the policy (a reward
                               factor it collapsed under, a learning rate whose first updates overwrote it); proposed
                               after budget skills, before the rest
    hypothesis, predicted_effect   text the manifest carries
    backtest                   {question: ...}: replay the parent's rollouts under the patch first
    refutes                    negative evidence: changes known to hurt ({path: reward.terms, term: {...}})
    analyzer, provides, threshold_metric   harness skills: the analyzer file and the metrics it emits
    outcomes                   harness skills: install when reflecting on these last outcomes (e.g. [mixed])
    evidence                   [{version, outcome, domain}]: where it was used and what happened

Built-ins (the shipped `skills/`) and a workspace's own `skills/` load through
the same code; a workspace skill overrides a built-in of the same name.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evo.errors import AgentError
from evo.resources import resource_dir
from evo.schemas import validate
from evo.yamlio import dump_yaml, parse_yaml, read_text

WINNING = ("improvement",)
LOSING = ("regression",)

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)---[ \t]*(?:\n|\Z)", re.S)


@dataclass
class Skill:
    name: str
    description: str
    kind: str = "policy"
    triggers: list[dict] = field(default_factory=list)
    requires: list[dict] = field(default_factory=list)
    patch: list[dict] = field(default_factory=list)
    domains: list[str] = field(default_factory=lambda: ["*"])
    findings: list[str] = field(default_factory=list)
    budget: bool = False
    repair: bool = False
    hypothesis: str = ""
    predicted_effect: str = ""
    backtest: dict | None = None
    refutes: list[dict] = field(default_factory=list)
    analyzer: str | None = None
    provides: list[str] = field(default_factory=list)
    threshold_metric: str | None = None
    outcomes: list[str] = field(default_factory=list)
    evidence: list[dict] = field(default_factory=list)
    body: str = ""
    path: Path | None = None  # the SKILL.md
    source: str = "builtin"  # builtin | workspace

    @property
    def analyzer_source(self) -> Path | None:
        """The analyzer a harness skill installs (`skill.py` beside SKILL.md)."""
        if self.path is None:
            return None
        candidate = self.path.parent / "skill.py"
        return candidate if candidate.exists() else None

    def applies_to(self, domain: str) -> bool:
        return "*" in self.domains or domain in self.domains

    def record(self) -> dict:
        """Uses, wins, losses and the domains where it was used, from `evidence`."""
        ev = self.evidence
        return {
            "uses": len(ev),
            "wins": sum(1 for e in ev if e.get("outcome") in WINNING),
            "losses": sum(1 for e in ev if e.get("outcome") in LOSING),
            "domains": sorted({e["domain"] for e in ev if e.get("domain")}),
        }

    def summary(self) -> dict:
        return {"name": self.name, "kind": self.kind, "description": self.description, "applies_to": self.domains,
                "source": self.source, "path": str(self.path) if self.path else None, **self.record()}


def _front_matter(text: str, source: str) -> re.Match:
    match = _FRONT_MATTER.match(text)
    if not match:
        raise AgentError(f"{source}: no YAML front matter; start the file with '---', the fields, and '---'")
    return match


def split_front_matter(text: str, *, source: str) -> tuple[dict, str]:
    match = _front_matter(text, source)
    return parse_yaml(match.group(1), source=source), text[match.end():]


def parse_skill(path: str | Path, *, source: str = "builtin") -> Skill:
    """Read one SKILL.md; raise AgentError naming the file and field on a bad front matter."""
    path = Path(path)
    return parse_skill_text(read_text(path, source=str(path), kind="Markdown"), path, source=source)  # binary / non-UTF-8: one line


def parse_skill_text(text: str, path: Path, *, source: str = "builtin") -> Skill:
    meta, body = split_front_matter(text, source=str(path))
    validate(meta, "skill", source=str(path), error_cls=AgentError)
    if meta["name"] != path.parent.name:
        raise AgentError(f"{path}: name: {meta['name']!r} differs from its folder {path.parent.name!r}; make them equal")
    # Other Agent Skills fields (license, allowed-tools, ...) are for coding agents; they are kept in the file only.
    fields = {k: v for k, v in meta.items()
              if k in Skill.__dataclass_fields__ and k not in ("body", "path", "source") and v is not None}
    skill = Skill(**fields, body=body.strip(), path=path, source=source)
    if skill.kind == "harness" and skill.analyzer is None and skill.analyzer_source is not None:
        skill.analyzer = skill.name.replace("-", "_")
    return skill


def _skills_in(folder: Path, source: str) -> dict[str, Skill]:
    found = {}
    if folder.is_dir():
        for skill_md in sorted(folder.glob("*/SKILL.md")):
            skill = parse_skill(skill_md, source=source)
            found[skill.name] = skill
    return found


def load_skills(where: str | Path | list | tuple | None = None, *, builtin: bool = True) -> list[Skill]:
    """Load skills, sorted by name; a later folder overrides an earlier skill of the same name.

    `load_skills(root)`: the built-ins overlaid by `<root>/skills/`.
    `load_skills([dir_a, dir_b])`: exactly these skill folders, in order (the
    built-in folder, `evo.resources.resource_dir("skills")`, counts as built-in).
    """
    shipped = resource_dir("skills")
    if isinstance(where, (list, tuple)):
        folders = [(Path(d), "builtin" if Path(d).resolve() == shipped.resolve() else "workspace") for d in where]
    else:
        folders = [(shipped, "builtin")] if builtin else []
        if where is not None:
            folders.append((Path(where) / "skills", "workspace"))
    skills: dict[str, Skill] = {}
    for folder, source in folders:
        skills.update(_skills_in(folder, source))
    return [skills[n] for n in sorted(skills)]


def _evidence_block(entries: list[dict]) -> str:
    if not entries:
        return "evidence: []\n"
    lines = ["evidence:"]
    for e in entries:
        item = dump_yaml({k: e[k] for k in ("version", "outcome", "domain") if k in e}).strip().replace("\n", ", ")
        lines.append(f"  - {{{item}}}")
    return "\n".join(lines) + "\n"


# Built-in skills renamed since a workspace may have recorded a version under the old name: old -> new.
RENAMED = {"drop-efficiency-factor": "drop-efficiency-term"}


def update_skill_evidence(skills_dir: str | Path, skill_name: str, version: str, outcome: str, domain: str, *,
                          supersedes: str | None = None) -> list[Path]:
    """Record that `skill_name` was used by `version` with `outcome` in `domain`; returns the files it wrote.

    Rewrites only the `evidence:` block of the front matter (the rest of the file
    is left byte for byte). Recording the same version again replaces its entry,
    so a resumed step never counts a use twice; `supersedes` (the version a
    re-measure measured again) drops that version's entry too, so one change
    counts once, by its better-measured verdict. A built-in skill the workspace
    has not copied yet is copied into `skills_dir` first: the shipped files are
    never modified.
    """
    skills_dir = Path(skills_dir)
    if not (skills_dir / skill_name / "SKILL.md").exists():
        skill_name = RENAMED.get(skill_name, skill_name)  # a version proposed before its built-in skill was renamed
    target = skills_dir / skill_name / "SKILL.md"
    written: list[Path] = []
    if not target.exists():
        shipped = resource_dir("skills") / skill_name
        if not (shipped / "SKILL.md").exists():
            raise AgentError(f"no skill named {skill_name!r} in {skills_dir} or the built-ins; check the manifest's skill field")
        shutil.copytree(shipped, skills_dir / skill_name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        written += sorted(p for p in (skills_dir / skill_name).rglob("*") if p.is_file() and p.name != "SKILL.md")
    text = target.read_text(encoding="utf-8")
    match = _front_matter(text, str(target))
    meta = parse_yaml(match.group(1), source=str(target))
    entries = [e for e in (meta.get("evidence") or []) if e.get("version") not in (version, supersedes)]
    entries.append({"version": version, "outcome": outcome, "domain": domain})
    front = match.group(1)
    block = _evidence_block(entries)
    # The evidence key and its indented / list continuation lines, up to the next top-level key.
    pattern = re.compile(r"^evidence:.*\n(?:(?:[ \t]+|-).*\n|\n)*", re.M)
    front = pattern.sub(lambda _: block, front, count=1) if pattern.search(front) else front + block
    new_text = "---\n" + front + "---\n" + text[match.end():]
    parse_skill_text(new_text, target, source="workspace")  # the rewrite must still load before it lands
    if new_text != text:
        target.write_text(new_text, encoding="utf-8")
        written.append(target)
    return written


def usage_table(skills: list[Skill]) -> list[dict[str, Any]]:
    """What `evo skills list` shows: one row per skill with its record."""
    return [s.summary() for s in skills]
