"""`evo train` and `evo eval`: run a recipe standalone, evaluate a checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

import click

from evo.cli.common import console, emit, json_option


def _load_recipe(path: str):
    from evo.recipe import load_recipe
    from evo.resources import resource_dir

    p = Path(path)
    if not p.exists() and not p.suffix and (resource_dir("recipes") / f"{path}.yaml").exists():
        p = resource_dir("recipes") / f"{path}.yaml"  # a built-in recipe by name
    return load_recipe(p), p


def _render_eval(ev: dict, c) -> None:
    strata = "  ".join(f"{s} {v:.3f}" for s, v in ev["per_stratum"].items())
    c.print(f"Avg@{ev['k']}: {ev['avg_at_k']:.4f}  pass@{ev['k']}: {ev['pass_at_k']:.4f}  "
            f"tasks: {ev['n_tasks']}  seed: {ev['seed']}")
    c.print(f"per stratum: {strata}")


@click.command("train")
@click.argument("recipe", type=str)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Run folder (default: runs/<recipe name>). Rerunning resumes an unfinished run.")
@click.option("--from", "init_checkpoint", type=str, default=None,
              help="Start from this checkpoint folder instead of the recipe's model.name "
                   "(with its AdamW moments when it holds them).")
@click.option("--version", "version", type=str, default="", help="Version name stored in the rollout records.")
@click.option("--restart", is_flag=True, help="Discard what the run folder holds and train from scratch.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="Data-parallel training processes (one per GPU); started with --launcher.")
@click.option("--launcher", type=click.Choice(["torchrun", "deepspeed"]), default="torchrun", show_default=True,
              help="What starts the --nproc processes.")
@json_option
def train_command(recipe, out_dir, init_checkpoint, version, restart, no_progress, nproc, launcher, as_json):
    """Train RECIPE (a recipe YAML file or a built-in recipe name) with GRPO.

    Writes rollouts.parquet, metrics.jsonl, checkpoint/, eval.parquet, eval.json
    and summary.json into the run folder. Ctrl-C saves a checkpoint after the
    current step; running the same command again resumes. A finished run is
    reported without training again. --nproc N trains data-parallel on N
    processes (each samples its share of every step's prompts); running this
    command under an outside torchrun works too, and only rank 0 reports.
    """
    from evo.recipe import recipe_hash
    from evo.train.distributed import launched_world
    from evo.train.launch import run_training
    from evo.train.records import write_json
    from evo.train.run import clear_run

    spec, path = _load_recipe(recipe)
    out = out_dir or Path("runs") / (spec.get("name") or path.stem)
    main_rank = int(os.environ.get("RANK", "0")) == 0 or launched_world() == 1
    if main_rank:
        if restart:
            clear_run(out)
        out.mkdir(parents=True, exist_ok=True)
        from evo.yamlio import load_yaml

        # The YAML as written (normalising again gives `spec`), so `evo eval` can rebuild it.
        write_json({"recipe_hash": recipe_hash(spec), "source": str(path), "recipe": load_yaml(path)},
                   out / "recipe.json")
    result = run_training(spec, out, init_checkpoint=init_checkpoint, version=version,
                          progress=not (no_progress or as_json), nproc=nproc, launcher=launcher)
    if not main_rank:
        return
    summary = dict(result.summary, out_dir=str(result.out_dir), checkpoint_dir=str(result.checkpoint_dir))

    def render(s):
        c = console()
        final = s.get("final") or {}
        c.print(f"trained {s['steps']} steps in {s['wall_s']:.1f}s -> {s['checkpoint_dir']}")
        if final:
            c.print(f"last step: reward {final.get('reward/mean', 0):.3f}  dead groups "
                    f"{final.get('signal/dead_group_ratio', 0):.2f}  truncated {final.get('gen/truncated_frac', 0):.2f}")
        _render_eval(s["eval"], c)

    emit(summary, as_json, render)


@click.command("eval")
@click.argument("checkpoint", type=str)
@click.option("--recipe", "recipe", type=str, default=None,
              help="Recipe giving domain, generation limits and eval settings (default: the run's recipe.json "
                   "next to CHECKPOINT, else the built-in arithmetic-tiny).")
@click.option("--k", "k", type=click.IntRange(min=1), default=None, help="Samples per task (default: recipe eval.k).")
@click.option("--seed", "seed", type=click.IntRange(min=0), default=None, help="Sampling seed (default: recipe eval.seed).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write eval.parquet and eval.json here.")
@json_option
def eval_command(checkpoint, recipe, k, seed, out_dir, as_json):
    """Compute Avg@k of CHECKPOINT (a checkpoint folder, builtin:tiny-char or a model id) with a fixed seed."""
    from evo.recipe import normalize_recipe
    from evo.train.evaluate import evaluate
    from evo.train.records import read_json_if

    if recipe is not None:
        spec, _ = _load_recipe(recipe)
    else:
        stored = read_json_if(Path(checkpoint).parent / "recipe.json") if Path(checkpoint).exists() else None
        spec = normalize_recipe(stored["recipe"]) if stored else _load_recipe("arithmetic-tiny")[0]
    ev = evaluate(checkpoint, spec, out_dir, k=k, seed=seed)
    emit(ev, as_json, lambda e: _render_eval(e, console()))


def register(group):
    """Add this module's commands to the `evo` group."""
    group.add_command(train_command)
    group.add_command(eval_command)
