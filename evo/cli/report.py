"""`evo report`, `evo plot` and `evo track`: see the evolution (library: evo.report).

Long work shows a progress bar on stderr when stderr is a terminal; under
`--json` or when piped it stays silent, so stdout carries only the result.
"""

from __future__ import annotations

import contextlib
import re
import sys
from pathlib import Path

import click

from evo.cli.common import console, emit, json_option, workspace_option


@contextlib.contextmanager
def progress_bar(label: str, quiet: bool):
    """Yield a `progress(done, total)` callback: a rich bar on a terminal, nothing otherwise."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@click.command("report")
@workspace_option
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="HTML file to write (default: .evo/report.html in the workspace).")
@click.option("--open", "open_", is_flag=True, help="Open the page in the default web browser.")
@click.option("--png", "png_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write the lineage and trend pictures as PNG files into this folder.")
@json_option
def report_cmd(workspace, out, open_, png_dir, as_json):
    """Write one self-contained HTML page of the workspace's evolution.

    The lineage tree (click a version for its hypothesis, evidence, backtest,
    audits, diagnosis, cost and PR body), Avg@k along the promoted path with
    intervals, each version's Δ vs parent and vs control, training curves over
    global steps, skills and negative evidence, and totals. Works offline: every
    script is inlined, nothing is fetched.
    """
    from evo.lineage import Lineage
    from evo.report.data import gather
    from evo.report.html import write_report
    from evo.settings import load_settings

    lineage = Lineage.open(workspace)
    settings = load_settings(lineage.root)
    with progress_bar("reading versions", as_json) as progress:
        model = gather(lineage.root, settings, lineage=lineage, progress=progress)
    result = write_report(lineage.root, out, settings=settings, model=model)
    if png_dir:
        from evo.report.plots import write_workspace_plots

        result["pngs"] = [str(p) for p in write_workspace_plots(model, png_dir)]
    if open_:
        import webbrowser

        result["opened"] = webbrowser.open(Path(result["path"]).as_uri())

    def render(r):
        click.echo(f"wrote {r['path']} ({r['bytes'] / 1e6:.1f} MB, {r['versions']} versions)")
        for p in r.get("pngs", []):
            click.echo(f"wrote {p}")
        if open_ and not r["opened"]:
            click.echo("no web browser could be started; open the file above by hand")

    emit(result, as_json, render)


@click.command("plot")
@workspace_option
@click.argument("version")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the PNG files (default: the version's artifact folder, plots/; `evo pr` lists them).")
@json_option
def plot_cmd(workspace, version, out_dir, as_json):
    """Write VERSION's pictures as PNG: training curves, Avg@k along its ancestry, and the lineage."""
    from evo.lineage import Lineage
    from evo.report.data import gather
    from evo.report.plots import SIZE, write_version_plots
    from evo.settings import load_settings

    lineage = Lineage.open(workspace)
    settings = load_settings(lineage.root)
    with progress_bar("reading versions", as_json) as progress:
        model = gather(lineage.root, settings, lineage=lineage, progress=progress, pr_bodies=0)
    paths = write_version_plots(lineage.root, version, out_dir, settings=settings, model=model)
    emit({"version": version, "pngs": [str(p) for p in paths], "size": list(SIZE)}, as_json,
         lambda d: [click.echo(f"wrote {p}") for p in d["pngs"]])


@click.command("track")
@workspace_option
@click.argument("target")
@click.option("--to", "to", multiple=True, type=click.Choice(("wandb", "tensorboard", "trackio")),
              help="Tracker(s) to log to (default: evo.yaml logging:). Repeatable.")
@click.option("--project", default=None, help="W&B / Trackio project (default: the workspace's name).")
@click.option("--log-dir", default=None, help="TensorBoard log folder (default: .evo/tensorboard, or DIR/tensorboard for a run folder).")
@click.option("--mode", type=click.Choice(("offline", "online")), default="offline", show_default=True, help="W&B mode.")
@json_option
def track_cmd(workspace, target, to, project, log_dir, mode, as_json):
    """Log TARGET to experiment trackers: a version of the workspace (vN), or a run folder from `evo train --out`.

    Every training step's metrics at its global step, sampled completions per
    step, the evaluation, and (for a version) its lineage fields as the run's
    summary: what the loop logs after judging a version when evo.yaml sets
    `logging:` (evo.report.trackers.log_version).
    """
    from evo.report.trackers import log_run, log_version

    logging = {}
    for name in to:
        logging[name] = {"wandb": {"project": project, "mode": mode}, "tensorboard": {"log_dir": log_dir},
                         "trackio": {"project": project}}[name]
    with progress_bar("logging", as_json) as progress:
        if not re.fullmatch(r"v[0-9]+", target):
            if not Path(target).is_dir():
                raise click.UsageError(f"{target!r} is neither a version (vN) nor a run folder")
            if not logging:
                raise click.UsageError(f"{target} is a run folder; name the tracker with --to")
            result = log_run(target, logging, progress=progress)
        else:
            from evo.errors import VersionError
            from evo.lineage import Lineage
            from evo.settings import load_settings

            lineage = Lineage.open(workspace)
            settings = load_settings(lineage.root)
            if logging:
                settings = {**settings, "logging": {**settings.get("logging", {}), "wandb": None, "tensorboard": None,
                                                    "trackio": None, **logging}}
            records = lineage.read_all()
            if target not in records:
                raise VersionError(f"unknown version {target!r}; `evo log` lists the versions")
            result = log_version(lineage.root, settings, target, records=records, progress=progress)
            if not result:
                raise click.UsageError("evo.yaml sets no logging: tracker; add one or pass --to")
    emit({"target": target, "logged": result}, as_json,
         lambda d: [console().print(f"{k}: {v}") for k, v in d["logged"].items()])


def register(group):
    for cmd in (report_cmd, plot_cmd, track_cmd):
        group.add_command(cmd)
