"""`evo analyze`, `evo compare`, `evo backtest`: the diagnostic harness from the command line.

Each takes a version of the workspace (`v3`, `base`) or a plain run folder, so
the harness also works on runs made outside a workspace. Heavy imports happen
inside the command bodies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import click

from evo.cli.common import console, emit, json_option, workspace_option

_VERSION_NAME = re.compile(r"^(v\d+|base)$")


@dataclass
class Target:
    """A version (with its workspace context) or a plain run folder."""

    run_dir: Path
    version: str = ""
    root: Path | None = None
    settings: dict = field(default_factory=dict)


def _resolve(target: str, workspace: Path) -> Target:
    from evo.errors import HarnessError
    from evo.settings import SETTINGS_FILE, artifact_dir, load_settings

    is_workspace = (workspace / SETTINGS_FILE).exists()
    if is_workspace and _VERSION_NAME.match(target):
        settings = load_settings(workspace)
        run_dir = artifact_dir(workspace, settings, target)
        if not run_dir.is_dir():
            from evo.lineage import Lineage

            Lineage.open(workspace).record(target)  # a version it does not know: its error, naming those it does
            raise HarnessError(f"{target} has no artifacts at {run_dir}; run `evo step` to train and evaluate it")
        return Target(run_dir, target, workspace, settings)
    path = Path(target)
    if path.is_dir():
        return Target(path)
    where = f"a version of the workspace at {workspace}" if is_workspace else f"a version (no {SETTINGS_FILE} in {workspace})"
    raise HarnessError(f"'{target}' is neither a run folder nor {where}; pass a run folder or use -C <workspace>")


def _lineage(root: Path):
    from evo.lineage import Lineage

    return Lineage.open(root)


def _recipe_for(t: Target, recipe_file: Path | None, lineage=None) -> dict:
    """The recipe the run trained with: --recipe, the version's recipe.yaml, the recipe.json
    `evo train` saves in its run folder, or a recipe.yaml in the run folder or the workspace."""
    from evo.errors import EvoError
    from evo.recipe import load_recipe, normalize_recipe
    from evo.train.records import read_json_if

    if recipe_file is not None:
        return load_recipe(recipe_file)
    if lineage is not None and t.version and t.version != "base":
        from evo.loop.versions import recipe_of

        try:
            return recipe_of(lineage, t.version)
        except EvoError:
            pass
    saved = read_json_if(t.run_dir / "recipe.json")
    if saved is not None:
        return normalize_recipe(saved["recipe"], source=str(t.run_dir / "recipe.json"))
    for candidate in (t.run_dir / "recipe.yaml", (t.root / "recipe.yaml") if t.root else None):
        if candidate is not None and candidate.exists():
            return load_recipe(candidate)
    return {}


def _console():
    """A console that never hard-wraps: long lines stay greppable one-liners."""
    con = console()
    con.soft_wrap = True
    return con


def _print_digest(diag: dict) -> None:
    from evo.harness.digest import headline, sorted_findings

    con = _console()
    title = diag.get("version") or diag.get("run_dir", "")
    con.print(f"[bold]{title}[/bold]  harness {diag['harness_version']}")
    con.print(headline(diag))
    for v in diag["audits"]["vetoes"]:
        con.print(f"[red]veto[/red] {v['audit']}: {v['message']}")
    colours = {"critical": "red", "warning": "yellow", "info": "dim"}
    findings = sorted_findings(diag)
    for f in findings[:10]:
        con.print(f"[{colours[f['severity']]}]{f['severity']:>8}[/] {f['id']}: {f['message']}")
    if len(findings) > 10:
        con.print(f"[dim]… {len(findings) - 10} more findings in diagnosis.json[/dim]")
    counts = diag.get("counts", {})
    con.print(f"[dim]{counts.get('critical', 0)} critical, {counts.get('warning', 0)} warning, {counts.get('info', 0)} info; "
              f"wrote {Path(diag['run_dir']) / 'diagnosis.json'} and diagnosis.md[/dim]")


def _print_comparison(r: dict) -> None:
    con = _console()
    colour = {"improvement": "green", "regression": "red", "mixed": "yellow", "insufficient": "dim"}[r["outcome"]]
    con.print(f"[bold {colour}]{r['outcome']}[/]  {r['metric']} {r['value']:.4f} vs {r['baseline_value']:.4f}: "
              f"delta {r['delta']:+.4f}, 95% CI [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}], Wilcoxon p={r['p_value']:.3g} "
              f"({r['n_tasks']} tasks x {r['k']} samples, B={r['B']})")
    if len(r["per_stratum"]) > 1:
        for s, p in sorted(r["per_stratum"].items()):
            con.print(f"  {s:<16} {p['value']:.4f} vs {p['baseline_value']:.4f}: {p['delta']:+.4f} "
                      f"[{p['ci_low']:+.4f}, {p['ci_high']:+.4f}] ({p['n_tasks']} tasks)")
    for reason in r["reasons"]:
        con.print(f"  [dim]- {reason}[/dim]")


def _print_backtest(r: dict) -> None:
    con = _console()
    con.print(f"[bold]backtest[/bold] {r['run_dir']} ({r['n_trajectories']} trajectories, {r['n_groups']} groups)")
    con.print(r["message"])
    for key in ("dead_group_ratio", "kept_trajectories", "kept_groups", "nonzero_advantage_frac", "advantage_abs_mean", "reward_mean"):
        b, a = r["before"][key], r["after"][key]
        fmt = (lambda x: f"{x:.4g}") if isinstance(b, float) else str
        con.print(f"  {key:<26} {fmt(b):>10} -> {fmt(a)}")
    for note in r["notes"]:
        con.print(f"  [yellow]note[/yellow] {note}")


def register(group):
    """Add this module's commands to the `evo` group."""

    @group.command("analyze")
    @click.argument("target")
    @workspace_option
    @click.option("--parent", "parent", default=None, help="Baseline to compare with: a version or a run folder (default: the version's parent).")
    @click.option("--promoted", "promoted", default=None, help="Promoted head to compare with: a version or a run folder.")
    @click.option("--recipe", "recipe_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
                  help="Recipe the run trained with (default: the version's recipe.yaml, or the recipe.json evo train saved in the run folder).")
    @click.option("--analyzers", "extra_dirs", multiple=True, type=click.Path(file_okay=False, exists=True, path_type=Path),
                  help="Extra analyzer folder, loaded after the built-ins (repeatable); same names override.")
    @json_option
    def analyze_cmd(target, workspace, parent, promoted, recipe_file, extra_dirs, as_json):
        """Diagnose a version (or a run folder): run every analyzer and audit over its artifacts.

        Writes diagnosis.json and diagnosis.md into the run's artifact folder and
        prints a short digest: headline, vetoes, findings by severity.
        """
        from evo.harness.diagnose import diagnose
        from evo.resources import resource_dir

        t = _resolve(target, workspace)
        dirs = [resource_dir("analyzers")]
        kwargs = {"settings": t.settings, "version": t.version}
        lineage = None
        if t.root is not None:  # a workspace version: diagnosed exactly as `evo step` diagnoses it
            from evo.loop.versions import diagnosis_inputs

            lineage = _lineage(t.root)
            inputs = diagnosis_inputs(lineage, lineage.read_all(), t.root, t.settings, t.version)
            dirs.append(inputs.pop("tree") / "analyzers")
            kwargs.update(inputs)
        if parent:
            kwargs["parent_run_dir"] = _resolve(parent, workspace).run_dir
        if promoted:
            kwargs["promoted_run_dir"] = _resolve(promoted, workspace).run_dir
        recipe = _recipe_for(t, recipe_file, lineage)
        diag = diagnose(t.run_dir, recipe=recipe, analyzer_dirs=dirs + list(extra_dirs), out_dir=t.run_dir, **kwargs)
        emit(diag, as_json, _print_digest)

    @group.command("compare")
    @click.argument("baseline")
    @click.argument("candidate")
    @workspace_option
    @click.option("-B", "--bootstrap", "B", type=click.IntRange(min=100), default=None,
                  help="Bootstrap resamples (default: evo.yaml search.bootstrap_samples, else 10000).")
    @click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
    @json_option
    def compare_cmd(baseline, candidate, workspace, B, seed, as_json):
        """Paired comparison of CANDIDATE against BASELINE on their common validation tasks.

        Old first, then new, as in `evo diff`: `evo compare v0 v2` asks whether v2
        improved on v0. Delta (CANDIDATE - BASELINE) Avg@k with a stratified
        paired-bootstrap 95% interval, a two-sided Wilcoxon p-value, per-stratum
        deltas and the outcome class (improvement, regression, mixed,
        insufficient). Each argument is a version or a run folder.
        """
        from evo.harness.compare import compare_runs
        from evo.harness.stats import DEFAULT_B
        from evo.recipe import get_path

        a, b = _resolve(candidate, workspace), _resolve(baseline, workspace)  # compare_runs(child, parent)
        if B is None:
            B = int(get_path(a.settings, "search.bootstrap_samples", DEFAULT_B))
        noise, seeds = None, {}
        if a.root is not None and a.version and b.version:
            # Two versions of one workspace: each is one training draw (the base model none), so the interval
            # is read against the seed noise the workspace measured, as the loop's own verdicts are.
            from evo.loop.runs import workspace_noise

            noise = workspace_noise(_lineage(a.root).read_all())
            seeds = {"child_seeds": None if a.version == "base" else 1, "parent_seeds": None if b.version == "base" else 1}
        result = compare_runs(a.run_dir, b.run_dir, B=B, seed=seed, noise=noise, **seeds)

        def render(r):
            _console().print(f"[bold]{candidate}[/] (candidate) vs [bold]{baseline}[/] (baseline)")
            _print_comparison(r)

        emit(result, as_json, render)

    @group.command("backtest")
    @click.argument("target")
    @click.option("--change", "change_file", required=True, type=click.Path(dir_okay=False, exists=True, path_type=Path),
                  help="YAML recipe patch, e.g. `filters: {std_group: {enabled: true, epsilon: 1.0e-6}}`.")
    @workspace_option
    @click.option("--recipe", "recipe_file", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
                  help="Recipe the run trained with (default: the version's recipe.yaml, or the recipe.json evo train saved in the run folder).")
    @json_option
    def backtest_cmd(target, change_file, workspace, recipe_file, as_json):
        """Replay a run's stored rollouts under a reward or filter change, without generating.

        Reports dead-group ratio, kept trajectories and advantages before and after,
        and the predicted effect in one sentence.
        """
        from evo.errors import HarnessError
        from evo.harness.backtest import backtest
        from evo.yamlio import load_yaml

        t = _resolve(target, workspace)
        lineage = _lineage(t.root) if t.root is not None and t.version not in ("", "base") else None
        recipe = _recipe_for(t, recipe_file, lineage)
        if not recipe:
            raise HarnessError(f"{t.run_dir}: no recipe found for this run; pass the one it trained with as --recipe FILE")
        change = load_yaml(change_file)
        emit(backtest(t.run_dir, change, recipe), as_json, _print_backtest)
