"""`evo step`, `evo run`, `evo approve`, `evo reject`, `evo pr`, `evo validate`."""

from __future__ import annotations

import click

from evo.agent import BACKENDS
from evo.cli.common import console, emit, json_option, workspace_option

AGENTS = click.Choice(BACKENDS)


def _print_report(report) -> None:
    click.echo(report.summary_block())


def _track(workspace, report) -> None:
    """Log a judged version to the experiment trackers evo.yaml configures (`logging:`); a failure is a warning.

    Done here, after the step, not inside it: the step's record is already
    written, and a tracker being down must never undo or block it.
    """
    if report.status != "done" or not report.version:
        return
    from evo.errors import EvoError
    from evo.lineage.store import find_workspace_root
    from evo.report.trackers import log_version
    from evo.settings import load_settings

    root = find_workspace_root(workspace) or workspace
    try:
        where = log_version(root, load_settings(root), report.version, fields={"decision": report.decision})
    except (EvoError, OSError) as exc:
        click.echo(f"warning: {report.version} was not logged to the trackers: {exc}", err=True)
        return
    for backend, place in where.items():
        report.message = (report.message + "; " if report.message else "") + f"logged to {backend}: {place}"


def _runner(workspace, agent, dry_run, as_json):
    from evo.loop.step import StepRunner

    con = console()
    say = (lambda msg: None) if as_json else (lambda msg: con.print(f"[dim]>[/dim] {msg}"))
    return StepRunner(workspace, agent_backend=agent, dry_run=dry_run, say=say, progress=not as_json)


@click.command("step")
@workspace_option
@click.option("--agent", type=AGENTS, default=None, help="Trainer agent backend (default: evo.yaml agent.backend).")
@click.option("--dry-run", is_flag=True, help="Diagnose and propose, show what would run and its cost, change nothing.")
@json_option
def step_cmd(workspace, agent, dry_run, as_json):
    """Perform one journaled version transition.

    observe -> diagnose -> propose -> backtest -> gate -> run -> evaluate ->
    judge -> decide -> record. A killed step resumes with the next `evo step`.
    """
    report = _runner(workspace, agent, dry_run, as_json).run()
    _track(workspace, report)
    emit(report.as_dict(), as_json, lambda _data: _print_report(report))


@click.command("run")
@workspace_option
@click.option("--steps", type=click.IntRange(min=1), default=1, show_default=True, help="Number of steps.")
@click.option("--agent", type=AGENTS, default=None, help="Trainer agent backend.")
@json_option
def run_cmd(workspace, steps, agent, as_json):
    """Run `evo step` repeatedly; stops early on approval waits, budgets or nothing to do."""
    from evo.loop.gate import BudgetExceeded

    reports, stopped = [], ""
    for _ in range(steps):
        try:
            report = _runner(workspace, agent, False, as_json).run()
        except BudgetExceeded as exc:
            stopped = str(exc)
            break
        _track(workspace, report)
        reports.append(report)
        if not as_json:
            _print_report(report)
            click.echo()
        if report.status in ("awaiting-approval", "nothing-to-do"):
            stopped = f"stopped after {report.version or 'this step'}: {report.status}"
            break
    if as_json:
        emit({"steps": [r.as_dict() for r in reports], "stopped": stopped}, True, None)
    elif stopped:
        click.echo(stopped)


@click.command("calibrate")
@workspace_option
@click.option("--runs", type=click.IntRange(min=2, max=32), default=3, show_default=True,
              help="Runs of v0's recipe in all (v0 itself included); only the missing ones are trained.")
@json_option
def calibrate_cmd(workspace, runs, as_json):
    """Measure the noise floor: v0's recipe trained again from the base model under other seeds.

    The spread of Avg@k between these runs is the seed-to-seed noise every
    verdict's interval includes. `evo step` measures it when it bootstraps v0
    (evo.yaml search.calibration_seeds); this adds runs to a workspace that has
    fewer.
    """
    from evo.loop.step import StepRunner

    con = console()
    say = (lambda msg: None) if as_json else (lambda msg: con.print(f"[dim]>[/dim] {msg}"))
    result = StepRunner(workspace, say=say, progress=not as_json).calibrate(runs)

    def render(r):
        n = r["noise"]
        click.echo(f"calibrated {r['version']}: {len(r['seeds'])} runs (seeds {', '.join(map(str, r['seeds']))}; "
                   f"trained now: {', '.join(map(str, r['trained'])) or 'none'})")
        if n:
            click.echo(f"seed-to-seed sigma of Avg@k {n['sigma']:.4f} ({n['runs']} runs, {n['df']} df); "
                       f"noise floor of a one-seed comparison ±{r['noise_floor_one_seed']:.4f}")

    emit(result, as_json, render)


@click.command("approve")
@workspace_option
@click.argument("version")
@click.option("--reason", default="approved by a reviewer", show_default=True)
@json_option
def approve_cmd(workspace, version, reason, as_json):
    """Approve a version waiting at the cost gate; the next `evo step` runs it."""
    from evo.loop.approval import approve

    result = approve(workspace, version, reason)
    emit(result, as_json, lambda r: click.echo(f"{version} approved; run `evo step` to train it"))


@click.command("reject")
@workspace_option
@click.argument("version")
@click.option("--reason", default="rejected by a reviewer", show_default=True)
@json_option
def reject_cmd(workspace, version, reason, as_json):
    """Reject a version waiting at the cost gate; it is pruned and kept as evidence."""
    from evo.loop.approval import reject

    result = reject(workspace, version, reason)
    emit(result, as_json, lambda r: click.echo(f"{version} rejected" + (" and pruned (kept as evidence)" if r["pruned"] else "; it stays untrained")))


@click.command("pr")
@workspace_option
@click.argument("version")
@click.option("--open", "open_", is_flag=True, help="Push the branch and open the PR with `gh` (needs a remote).")
@json_option
def pr_cmd(workspace, version, open_, as_json):
    """Print the pull-request body for a version (and open it with --open)."""
    from evo.lineage import Lineage
    from evo.loop.pr import open_pr, pr_body
    from evo.settings import load_settings

    lineage = Lineage.open(workspace)
    pr = pr_body(lineage, workspace.resolve(), load_settings(workspace), version)
    if open_:
        pr["url"] = open_pr(lineage, pr, workspace.resolve())
    emit(pr, as_json, lambda p: click.echo(f"# {p['title']}\n\n{p['body']}" + (f"\nopened: {p['url']}" if p.get("url") else "")))


@click.command("validate")
@workspace_option
@json_option
def validate_cmd(workspace, as_json):
    """Check evo.yaml, recipe.yaml and every analyzer and skill loads (the cheap CI gate)."""
    from evo.loop.validate import validate_workspace

    result = validate_workspace(workspace)
    emit(result, as_json, lambda r: click.echo("\n".join(f"ok: {line}" for line in r["checked"])))


def register(group):
    for cmd in (step_cmd, run_cmd, calibrate_cmd, approve_cmd, reject_cmd, pr_cmd, validate_cmd):
        group.add_command(cmd)
