"""`evo skills`, `evo memory` and `evo agent`: the trainer agent's skills, memory and dry runs."""

from __future__ import annotations

import json
from pathlib import Path

import click

from evo.agent import BACKENDS
from evo.cli.common import console, emit, json_option, workspace_option


def _settings_for(workspace: Path, recipe: dict | None = None) -> dict:
    from evo.settings import SETTINGS_FILE, load_settings, normalize_settings

    if (workspace / SETTINGS_FILE).exists():
        return load_settings(workspace)
    domain = (recipe or {}).get("domain", {}).get("name", "arithmetic")
    model = (recipe or {}).get("model", {}).get("name", "builtin:tiny-char")
    return normalize_settings({"domain": domain, "model": model})


@click.group("skills")
def skills_group():
    """Reusable interventions: built-in skills plus the workspace's skills/."""


@skills_group.command("list")
@workspace_option
@json_option
def skills_list(workspace: Path, as_json: bool):
    """List skills with their uses, wins, losses and the domains they were used in."""
    from evo.agent.skills import load_skills, usage_table

    rows = usage_table(load_skills(workspace))

    def render(rows):
        width = max([len("skill")] + [len(r["name"]) for r in rows])
        click.echo(f"{'skill':<{width}}  {'kind':<7}  uses  wins  losses  used in / applies to")
        for r in rows:
            used = ", ".join(r["domains"]) or "-"
            click.echo(f"{r['name']:<{width}}  {r['kind']:<7}  {r['uses']:>4}  {r['wins']:>4}  {r['losses']:>6}  "
                       f"{used} / {', '.join(r['applies_to'])}{'' if r['source'] == 'builtin' else '  (workspace)'}")

    emit(rows, as_json, render)


@skills_group.command("show")
@click.argument("name")
@workspace_option
@json_option
def skills_show(name: str, workspace: Path, as_json: bool):
    """Show one skill: its triggers, patch, evidence and text."""
    from dataclasses import asdict

    from evo.agent.skills import load_skills
    from evo.errors import AgentError

    skills = {s.name: s for s in load_skills(workspace)}
    if name not in skills:
        raise AgentError(f"no skill named {name!r}; `evo skills list` shows {len(skills)} skills")
    skill = skills[name]
    data = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(skill).items()}
    data.update(skill.record())

    def render(d):
        out = console()
        out.print(f"[bold]{d['name']}[/bold] ({d['kind']}, {d['source']}): {d['description']}")
        for key in ("triggers", "requires", "patch", "refutes", "provides"):
            if d.get(key):
                out.print(f"{key}: {json.dumps(d[key])}")
        out.print(f"uses {d['uses']}, wins {d['wins']}, losses {d['losses']}, used in {', '.join(d['domains']) or '-'}")
        out.print(d["body"], markup=False)

    emit(data, as_json, render)


@click.group("memory")
def memory_group():
    """The workspace's memory/: lineage digest, recurring cases, negative evidence, search notes."""


@memory_group.command("show")
@workspace_option
@json_option
def memory_show(workspace: Path, as_json: bool):
    """Show what the trainer agent remembers (refuted interventions first)."""
    from evo.agent.memory import Memory

    memory = Memory.load(workspace)
    data = {"negative_evidence": memory.negative, "recurring_cases": memory.recurring_md,
            "lineage": memory.lineage_md, "search_notes": memory.search_notes_md}
    emit(data, as_json, lambda _: console().print(memory.digest(limit=20000), markup=False))


def _read_diagnosis(path: Path) -> dict:
    """The diagnosis.json given with --diagnosis, or a one-line error naming it."""
    from evo.errors import ConfigError
    from evo.yamlio import decode_text, display_path

    source = display_path(path)
    try:
        data = json.loads(decode_text(path.read_bytes(), source=source, kind="JSON"))
    except ValueError as exc:
        raise ConfigError(f"{source}: not valid JSON ({exc}); give the diagnosis.json `evo analyze` writes") from None
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        raise ConfigError(f"{source}: not a diagnosis (no 'metrics' mapping); give the diagnosis.json `evo analyze` writes")
    return data


def _dry_context(workspace: Path, diagnosis_path: Path, recipe_path: Path | None, phase: str, scratch: Path):
    import shutil

    from evo.agent import AgentContext
    from evo.agent.memory import Memory
    from evo.agent.skills import load_skills
    from evo.recipe import load_recipe

    recipe_path = recipe_path or workspace / "recipe.yaml"
    recipe = load_recipe(recipe_path)
    settings = _settings_for(workspace, recipe)
    shutil.copy(recipe_path, scratch / "recipe.yaml")
    if (workspace / "analyzers").is_dir():
        shutil.copytree(workspace / "analyzers", scratch / "analyzers")
    diagnosis = _read_diagnosis(diagnosis_path)
    return AgentContext(phase=phase, root=workspace, worktree=scratch, version="candidate",
                        parent=diagnosis.get("version", "parent"), domain=recipe["domain"]["name"], recipe=recipe,
                        diagnosis=diagnosis, settings=settings, memory=Memory.load(workspace),
                        skills=load_skills(workspace)), settings


@click.group("agent")
def agent_group():
    """Run the trainer agent outside a step: see its prompt, or what it would propose."""


@agent_group.command("propose")
@click.option("--diagnosis", "diagnosis_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A diagnosis.json (e.g. .evo/artifacts/v2/diagnosis.json).")
@click.option("--recipe", "recipe_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The recipe to change (default: the workspace's recipe.yaml).")
@click.option("--agent", "backend", type=click.Choice(BACKENDS), default=None,
              help="Backend (default: evo.yaml agent.backend).")
@click.option("--phase", type=click.Choice(["propose", "reflect"]), default="propose", show_default=True)
@workspace_option
@json_option
def agent_propose(diagnosis_path: Path, recipe_path: Path | None, backend: str | None, phase: str, workspace: Path, as_json: bool):
    """Show the intervention the agent would propose for a diagnosis; changes nothing in the workspace.

    The agent works on a scratch copy of the recipe and analyzers.
    """
    import tempfile

    from evo.agent import get_agent

    with tempfile.TemporaryDirectory(prefix="evo-agent-") as tmp:
        ctx, settings = _dry_context(workspace, diagnosis_path, recipe_path, phase, Path(tmp))
        agent = get_agent(settings, backend=backend)
        proposal = agent.propose(ctx)
        data = {"agent": agent.name, "manifest": proposal.manifest if proposal else None,
                "usage": proposal.usage if proposal else agent.last_usage,
                "notes": proposal.notes if proposal else getattr(agent, "last_notes", [])}

    def render(d):
        out = console()
        m = d["manifest"]
        if m is None:
            out.print("no intervention: the evidence supports none")
        else:
            out.print(f"[bold]{m['kind']}[/bold] {m['change']}" + (f"  (skill {m['skill']})" if m.get("skill") else ""),
                      markup=True)
            out.print(f"hypothesis: {m['hypothesis']}", markup=False)
            out.print(f"predicted effect: {m['predicted_effect']}", markup=False)
            out.print(f"expected cost: {m['expected_cost']}", markup=False)
        for note in d["notes"]:
            out.print(f"  · {note}", markup=False)

    emit(data, as_json, render)


@agent_group.command("prompt")
@click.option("--diagnosis", "diagnosis_path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--recipe", "recipe_path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--phase", type=click.Choice(["propose", "reflect"]), default="propose", show_default=True)
@workspace_option
@json_option
def agent_prompt(diagnosis_path: Path, recipe_path: Path | None, phase: str, workspace: Path, as_json: bool):
    """Print the prompt an LLM agent would get, rendered from the workspace's trainer_prompts/."""
    import tempfile

    from evo.agent.prompts import render_prompt

    with tempfile.TemporaryDirectory(prefix="evo-agent-") as tmp:
        ctx, _ = _dry_context(workspace, diagnosis_path, recipe_path, phase, Path(tmp))
        prompt = render_prompt(ctx)
    emit({"phase": phase, "prompt": prompt}, as_json, lambda d: click.echo(d["prompt"]))


def register(group):
    """Add this module's commands to the `evo` group."""
    group.add_command(skills_group)
    group.add_command(memory_group)
    group.add_command(agent_group)
