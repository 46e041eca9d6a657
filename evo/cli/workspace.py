"""`evo init`, the workspace read commands (status, log, show, diff) and the
version transitions (promote, prune, revert, merge).

Library work happens in `evo.workspace` and `evo.lineage`, imported inside
each command so `evo --help` stays fast. Write commands hold the workspace lock.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from evo.agent import BACKENDS
from evo.cli.common import console, emit, json_option, workspace_option

STATE_STYLE = {"promoted": "bold green", "frontier": "cyan", "pruned": "dim", "reverted": "yellow",
               "awaiting-approval": "magenta"}


# ------------------------------------------------------------------ formatting
def headline_text(headline: dict | None, *, with_metric: bool = True) -> str:
    """'score/avg_at_k 0.412 Δ+0.031 [+0.004, +0.058]': value, delta vs baseline and its paired interval."""
    from evo.vocabulary import Headline

    return Headline.from_dict(headline).compact(with_metric=with_metric) if headline else ""


def summary(rec) -> dict:
    """The `evo log` row of a VersionRecord: the intervention as its short label, the events counted,
    and both verdict figures: `headline` against `against` (the control, or the parent) and `progress`."""
    from evo.loop.versions import is_confounded

    judged = rec.last("judged") or {}
    progress = judged.get("progress") or {}
    against = (judged.get("attributed") or {}).get("against") or judged.get("baseline")
    return {**rec.to_dict(), "intervention": rec.intervention_summary, "events": len(rec.events),
            "against": against, "confounded": is_confounded(rec),
            "progress": ({"against": progress["against"], "outcome": progress["outcome"], "headline": progress["headline"]}
                         if progress and progress.get("against") != against else None)}


def read_journal(root: Path) -> dict | None:
    """The in-flight `evo step` (the loop's journal), if any, and whether its process still runs."""
    from evo.errors import WorkspaceError
    from evo.loop.journal import Journal

    try:
        journal = Journal.load(root)
    except (WorkspaceError, OSError, ValueError) as exc:  # reported, not fatal: status is how a user finds out
        return {"error": str(exc)}
    if journal is None:
        return None
    data = dict(journal.data)
    pid = data.get("pid")
    alive = False
    if isinstance(pid, int):
        try:
            os.kill(pid, 0)
            alive = True
        except ProcessLookupError:
            alive = False
        except PermissionError:
            alive = True
    data["running"] = alive
    return data


# ------------------------------------------------------------------ commands
def register(group):
    """Add this module's commands to the `evo` group."""

    @group.command("init")
    @click.argument("directory", required=False, default=".", type=click.Path(file_okay=False, path_type=Path))
    @click.option("--domain", default=None, help="Domain to train (default arithmetic); picks recipes/<domain>-tiny.yaml.")
    @click.option("--model", default=None, help="Base model: builtin:tiny-char (arithmetic), builtin:tiny-char-mix "
                  "(calc, patch), a Hugging Face id or a local path.")
    @click.option("--agent", type=click.Choice(BACKENDS), default=None,
                  help="Trainer agent backend (default heuristic, offline).")
    @click.option("--recipe", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="Baseline recipe for v0 instead of the domain's built-in one (e.g. a human-engineered recipe).")
    @click.option("--force", is_flag=True, help="Turn a non-empty folder into a workspace.")
    @json_option
    def init_cmd(directory: Path, domain, model, agent, recipe, force, as_json):
        """Create a workspace in DIRECTORY (default: here) and commit its baseline as v0.

        Makes a git repository (or adopts an empty one) from the workspace
        template, copies the built-in analyzers, skills, prompts and the
        domain's recipe, and records v0 as promoted. Re-running on a workspace
        changes nothing.
        """
        from evo.lineage import Lineage
        from evo.workspace import init_workspace, is_workspace

        root = directory.expanduser().absolute()
        if is_workspace(root):
            asked = [f"--{name} {value}" for name, value in
                     (("domain", domain), ("model", model), ("agent", agent), ("recipe", recipe)) if value is not None]
            if asked:
                from evo.errors import WorkspaceError

                raise WorkspaceError(f"{root} is already an EvoTrainer workspace; {', '.join(asked)} not applied "
                                     "(nothing changed): give a new folder, or edit recipe.yaml / evo.yaml there "
                                     "and commit")
            emit({"workspace": str(root), "created": False}, as_json,
                 lambda d: click.echo(f"{root} is already an EvoTrainer workspace; nothing changed"))
            return
        init_workspace(root, domain=domain, model=model, agent=agent, force=force, recipe=recipe)
        rec = Lineage.open(root).record("v0")
        from evo.settings import load_settings

        settings = load_settings(root)
        data = {"workspace": str(root), "created": True, "domain": settings["domain"], "model": settings["model"],
                "agent": settings["agent"]["backend"], "v0": rec.commit}

        def render(d):
            click.echo(f"Initialised EvoTrainer workspace at {d['workspace']}")
            click.echo(f"  domain {d['domain']}, model {d['model']}, agent {d['agent']}")
            click.echo(f"  baseline v0 at {d['v0'][:12]} on main (branch evo/v0, tag evo/promoted/v0)")
            click.echo(f"Next: cd {d['workspace']} && evo step")

        emit(data, as_json, render)

    @group.command("status")
    @workspace_option
    @json_option
    def status_cmd(workspace: Path, as_json):
        """Show the workspace: promoted head, frontier, and any in-flight step."""
        from evo.errors import ConfigError
        from evo.lineage import Lineage
        from evo.recipe import load_recipe, recipe_hash
        from evo.settings import load_settings

        lin = Lineage.open(workspace)
        settings = load_settings(lin.root)
        try:
            loaded = load_recipe(lin.root / "recipe.yaml")
            recipe = {"name": loaded.get("name"), "hash": recipe_hash(loaded)}
        except ConfigError as exc:  # reported, not fatal: status is how a user finds out
            recipe = {"error": str(exc)}
        records = lin.read_all()
        head = Lineage.promoted_head(records)
        counts: dict[str, int] = {}
        for rec in records.values():
            counts[rec.state] = counts.get(rec.state, 0) + 1
        data = {
            "workspace": str(lin.root),
            "domain": settings["domain"],
            "model": settings["model"],
            "agent": settings["agent"]["backend"],
            "recipe": recipe,
            "promoted": summary(head) if head else None,
            "frontier": [summary(r) for r in Lineage.frontier(records)],
            "counts": counts,
            "in_flight": read_journal(lin.root),
        }

        def render(d):
            from rich.markup import escape

            out = console()
            out.soft_wrap = True  # one line per item, even when piped at 80 columns
            out.print(f"[bold]workspace[/] {d['workspace']}  ({d['domain']}, {d['model']}, agent {d['agent']})")
            r = d["recipe"]
            out.print(f"[bold]recipe[/]    {r.get('name') or ''} ({r['hash']})" if "hash" in r
                      else f"[bold]recipe[/]    [red]invalid[/]: {escape(r['error'])}")
            p = d["promoted"]
            out.print(f"[bold]promoted[/]  {p['name']} {p['commit'][:12]} {headline_text(p['headline'])}" if p
                      else "[bold]promoted[/]  none")
            if d["frontier"]:
                for f in d["frontier"]:
                    out.print(f"[bold]frontier[/]  {f['name']} ← {', '.join(f['parents']) or '-'} [{f['state']}] "
                              f"{f['intervention']} {f['outcome'] or ''} {headline_text(f['headline'])}".rstrip())
            else:
                out.print("[bold]frontier[/]  empty")
            out.print("[bold]versions[/]  " + ", ".join(f"{n} {s}" for s, n in sorted(d["counts"].items())))
            j = d["in_flight"]
            if j is None:
                out.print("[bold]step[/]      none in flight")
            elif "error" in j:
                out.print(f"[bold]step[/]      {j['error']}")
            else:
                how = "running" if j["running"] else "interrupted; `evo step` resumes it"
                out.print(f"[bold]step[/]      {j.get('version')} ← {', '.join(j.get('parents') or [])} "
                          f"phase {j.get('phase')} ({how}, pid {j.get('pid')}, since {j.get('started')})")

        emit(data, as_json, render)

    @group.command("log")
    @workspace_option
    @json_option
    def log_cmd(workspace: Path, as_json):
        """Show the lineage tree: each version's parents, intervention, outcome,
        headline metric with its interval, and state."""
        from evo.lineage import Lineage

        records = Lineage.open(workspace).read_all()
        rows = [summary(r) for r in records.values()]
        emit({"versions": rows}, as_json, render_log)

    @group.command("show")
    @click.argument("version")
    @workspace_option
    @json_option
    def show_cmd(version: str, workspace: Path, as_json):
        """Show one version: its lineage events, recipe and artifacts."""
        from evo.lineage import Lineage
        from evo.settings import artifact_dir, load_settings

        lin = Lineage.open(workspace)
        rec = lin.record(version)
        settings = load_settings(lin.root)
        run_dir = artifact_dir(lin.root, settings, version)
        recorded = [a for ev in rec.events if ev["event"] == "trained" for a in ev["artifacts"]]
        on_disk = sorted(
            ({"name": str(p.relative_to(run_dir)), "size": p.stat().st_size} for p in run_dir.rglob("*") if p.is_file()),
            key=lambda a: a["name"],
        ) if run_dir.is_dir() else []
        worktree = lin.worktree_path(version)
        data = {
            **summary(rec),
            "events": rec.events,
            "recipe": lin.file_at(version, "recipe.yaml") if rec.commit else None,
            "changed_paths": lin.changed_paths(version) if rec.parents else [],
            "artifacts": {"recorded": recorded, "dir": str(run_dir), "files": on_disk},
            "worktree": str(worktree) if worktree.is_dir() else None,
        }

        def render(d):
            out = console()
            style = STATE_STYLE.get(d["state"], "")
            out.print(f"[bold]{d['name']}[/] [{style}]{d['state']}[/] ← {', '.join(d['parents']) or '-'}  "
                      f"{d['commit'][:12]} ({d['branch']})")
            if d["intervention"]:
                out.print(f"intervention  {d['intervention']}")
            if d["outcome"]:
                against = f" vs {d['against']}" if d.get("against") else ""
                click.echo(f"outcome       {d['outcome']}{against}  {headline_text(d['headline'])}")
            if d.get("progress"):
                p = d["progress"]
                click.echo(f"progress      {p['outcome']} vs {p['against']}  {headline_text(p['headline'])}")
            if d.get("confounded"):
                out.print("confounded    compared with the parent only: the delta includes the gain of the extra "
                          "training steps (search.control: none, or judged before attribution)")
            if d["changed_paths"]:
                out.print("changed       " + ", ".join(d["changed_paths"]))
            out.print("[bold]events[/]")
            for ev in d["events"]:
                extra = {k: v for k, v in ev.items() if k not in ("event", "version", "time", "id")}
                click.echo(f"  {ev['time'][:19]}  {ev['event']:<10} {json.dumps(extra, default=str)[:200]}")
            out.print("[bold]artifacts[/]  " + (d["artifacts"]["dir"] if d["artifacts"]["files"] else "none on disk"))
            for a in d["artifacts"]["files"][:20]:
                click.echo(f"  {a['name']}  {a['size']:,} bytes")
            for a in d["artifacts"]["recorded"]:
                click.echo(f"  recorded {a['name']}  {a['uri']}  sha256 {str(a.get('sha256'))[:12]}")
            out.print("[bold]recipe.yaml[/]")
            click.echo((d["recipe"] or "").rstrip())

        emit(data, as_json, render)

    @group.command("diff")
    @click.argument("a")
    @click.argument("b")
    @workspace_option
    @json_option
    def diff_cmd(a: str, b: str, workspace: Path, as_json):
        """Compare versions A (old) and B (new): recipe changes, harness diff stat, metric deltas.

        Old first, then new, as in `evo compare`. Recipe values are the effective
        ones (schema defaults filled in), so a key B sets explicitly shows the
        value A really trained with, not None.
        """
        from evo.lineage import Lineage

        data = Lineage.open(workspace).diff(a, b)

        def render(d):
            out = console()
            out.print(f"[bold]{a} → {b}[/]")
            out.print("[bold]recipe[/]" + ("" if d["recipe"]["changes"] else "  unchanged"))
            for c in d["recipe"]["changes"]:
                out.print(f"  {c['key']}: {c[a]!r} → {c[b]!r}", markup=False)
            if d["recipe"]["diff"]:
                out.print(d["recipe"]["diff"].rstrip(), markup=False, highlight=False)
            out.print("[bold]harness[/]" + ("" if d["harness"] else "  unchanged"))
            for f in d["harness"]:
                out.print(f"  {f['path']}  +{f['added']} -{f['removed']}", markup=False)
            m = d["metrics"]
            if m["avg_at_k"]["delta"] is not None:
                out.print(f"[bold]Avg@k[/]  {m['avg_at_k'][a]:.3f} → {m['avg_at_k'][b]:.3f} ({m['avg_at_k']['delta']:+.3f})")
                for s, v in m["per_stratum"].items():
                    if v["delta"] is not None:
                        out.print(f"  {s}: {v[a]:.3f} → {v[b]:.3f} ({v['delta']:+.3f})", markup=False)
            else:
                out.print("[bold]Avg@k[/]  not recorded for both versions")
            for name in (a, b):
                if m["headline"][name]:
                    out.print(f"judged {name}: {m['outcome'][name]}  {headline_text(m['headline'][name])}", markup=False)

        emit(data, as_json, render)

    @group.command("fsck")
    @click.option("--repair", "do_repair", is_flag=True,
                  help="Apply the safe repairs: restore deleted branches, pruned refs and tags from the lineage, the notes "
                       "ref from its reflog; remove orphan worktrees and half-made versions; commit memory a killed step left.")
    @click.option("--quick", is_flag=True,
                  help="Hash only the promoted head's artifacts (what `evo step` checks); sizes are checked for all.")
    @workspace_option
    @json_option
    def fsck_cmd(do_repair: bool, quick: bool, workspace: Path, as_json: bool):
        """Check that refs, notes, journal, worktrees, artifacts and main agree.

        Prints one line per problem with the command that fixes it, and exits
        with status 1 while any remains. Every recorded artifact is checked for
        presence, size and sha256 (--quick: sha256 for the promoted head's only).
        """
        from evo.lineage import Lineage, fsck, workspace_lock
        from evo.lineage.repair import repair

        hashes = "head" if quick else "all"
        root = Lineage.open(workspace).root
        if do_repair:
            repaired, problems = repair(root, hashes=hashes)
        else:
            with workspace_lock(root, "evo fsck"):
                repaired, problems = [], fsck.check(root, hashes=hashes)
        data = {"workspace": str(root), "ok": not problems, "repaired": repaired,
                "problems": [p.to_dict() for p in problems]}

        def render(d):
            for line in d["repaired"]:
                click.echo(f"repaired: {line}")
            for p in problems:
                click.echo(f"{p.kind}: {p.line}")
            if not problems:
                click.echo("ok: refs, notes, journal, worktrees, artifacts and main agree")
            else:
                safe = sum(p.repairable for p in problems)
                click.echo(f"{len(problems)} problem(s)" + (f"; `evo fsck --repair` repairs {safe} of them" if safe else ""))

        emit(data, as_json, render)
        if problems:
            raise SystemExit(1)

    def transition(name: str, doc: str, two: bool = False):
        def run(workspace: Path, reason: str, versions: tuple[str, ...]):
            from evo.lineage import Lineage, workspace_lock

            lin = Lineage.open(workspace)
            with workspace_lock(lin.root, f"evo {name} {' '.join(versions)}"):
                result = getattr(lin, name)(*versions, reason)
            return lin, result

        if two:
            @group.command(name, help=doc)
            @click.argument("a")
            @click.argument("b")
            @click.option("--reason", required=True, help="Why; recorded in the lineage event.")
            @workspace_option
            def cmd(a, b, reason, workspace):
                lin, version = run(workspace, reason, (a, b))
                click.echo(f"created {version} merging {a} and {b} at {lin.head(version)[:12]} "
                           f"(worktree {lin.worktree_path(version)})")
        else:
            @group.command(name, help=doc)
            @click.argument("version")
            @click.option("--reason", required=True, help="Why; recorded in the lineage event.")
            @workspace_option
            def cmd(version, reason, workspace):
                _, commit = run(workspace, reason, (version,))
                done = {"promote": f"promoted {version}: merged into main as {commit[:12]}, tagged evo/promoted/{version}",
                        "prune": f"pruned {version}: kept at refs/evo/pruned/{version} ({commit[:12]}), branch and worktree removed",
                        "revert": f"reverted {version}'s promotion on main ({commit[:12]})"}[name]
                click.echo(done)
        return cmd

    transition("promote", "Promote VERSION: merge it into main (--no-ff) and tag evo/promoted/VERSION.\n\n"
               "Main must be clean; main's recipe and harness become the version's.")
    transition("prune", "Prune VERSION: keep its commits at refs/evo/pruned/VERSION as negative evidence, "
               "delete its branch and worktree.")
    transition("revert", "Revert VERSION's promotion on main (git revert -m 1 of the promotion merge).")
    transition("merge", "Create a new version that merges versions A and B (two parents in lineage).", two=True)


def render_log(data: dict) -> None:
    """Lineage as a table, one row per version; the parents column is the tree.

    A table, not a nested tree: a long run is a chain hundreds of versions deep,
    which a tree would indent off the screen.
    """
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("version", "parents", "state"):
        table.add_column(column, no_wrap=True)
    table.add_column("intervention", overflow="ellipsis", no_wrap=True, max_width=32)
    table.add_column("outcome", no_wrap=True)
    table.add_column("headline, Δ (interval) vs", no_wrap=True)
    table.add_column("progress vs parent", no_wrap=True)
    for r in data["versions"]:
        style = STATE_STYLE.get(r["state"], "")
        against = r.get("against") or ""
        shown = headline_text(r["headline"], with_metric=False) + (f" vs {against}" if against and r["headline"] else "")
        if r.get("confounded"):
            shown += " (confounded)"
        p = r.get("progress")
        progress = f"{p['outcome']} {headline_text(p['headline'], with_metric=False)}" if p else ""
        table.add_row(r["name"], " + ".join(r["parents"]) or "-", f"[{style}]{r['state']}[/]",
                      r["intervention"] or "", r["outcome"] or "", shown, progress)
    out = console()
    if not out.is_terminal:  # piped: keep rows whole for grep rather than folding them at 80 columns
        out.width = max(out.width, 200)
    out.print(table)
