"""`train_recipe`: run one recipe end to end and leave its evidence on disk.

One step: pick `prompts_per_step` train tasks (seeded by recipe seed and step),
sample `num_generations` trajectories per task, score them with the domain and
the recipe's reward terms, filter, compute group advantages, update the policy
(`evo.train.engine`), and record every trajectory (rollouts.parquet) and the
step's metrics (metrics.jsonl). At the end: the checkpoint, an evaluation on the
validation split (eval.parquet / eval.json) and summary.json, written last, so
its presence means the run finished.

Everything a step draws is derived from (recipe seed, step), and checkpoints
carry the optimizer, so a run resumed from its checkpoint continues exactly as
the uninterrupted run would. Ctrl-C finishes the current step, saves a
checkpoint and raises KeyboardInterrupt; a second Ctrl-C stops at once.

Under a launcher (`WORLD_SIZE > 1`, see `evo.train.launch`) every rank runs
`train_recipe`; rank 0 alone writes the run folder and shows progress, a stop
requested on any rank (Ctrl-C, or the launcher's stop file) stops all of them
after the same step, and every rank returns the same result.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from evo.errors import TrainError
from evo.recipe import recipe_hash


@dataclass
class TrainResult:
    out_dir: Path
    checkpoint_dir: Path
    summary: dict


STOP_FILE_ENV = "EVO_TRAIN_STOP_FILE"  # a launcher creates this file to ask its ranks to stop after the step


class _StopFlag:
    """Set by the first Ctrl-C (or the launcher's stop file); the loop checks it between steps."""

    def __init__(self):
        self.requested = False

    def seen(self, ranks) -> bool:
        """Whether any rank was asked to stop (every rank gets the same answer)."""
        stop_file = os.environ.get(STOP_FILE_ENV)
        return ranks.any(self.requested or bool(stop_file and os.path.exists(stop_file)))


@contextmanager
def _deferred_interrupt(flag: _StopFlag):
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        flag.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl-C stops at once

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def generation_seed(seed: int, step: int) -> int:
    """Seed of a step's rollout; calls within the rollout add their index."""
    return int(seed) * 1_000_003 + int(step) * 10_007


def pick_tasks(tasks: list, seed: int, step: int, count: int) -> list:
    """The step's prompts: a seeded sample without replacement (all tasks if fewer)."""
    rng = random.Random(f"evo-train-{seed}-{step}")
    return rng.sample(tasks, min(count, len(tasks)))


def _existing_run(out: Path, rhash: str):
    """(summary dict or None, checkpoint folder or None, its state or None) of a run in `out`."""
    from evo.train.checkpoint import find_checkpoint, read_state
    from evo.train.records import read_json_if

    summary = read_json_if(out / "summary.json")
    if summary is not None and summary.get("recipe_hash") != rhash:
        raise TrainError(f"{out}: holds a finished run of another recipe (hash {summary.get('recipe_hash')} != {rhash}); "
                         "choose another --out or delete the folder")
    ckpt = find_checkpoint(out / "checkpoint")
    state = read_state(ckpt) if ckpt else None
    if state is not None and state.get("recipe_hash") != rhash:
        raise TrainError(f"{out}: holds an unfinished run of another recipe (hash {state.get('recipe_hash')} != {rhash}); "
                         "choose another --out or delete the folder")
    return summary, ckpt, state


def train_recipe(recipe: dict, out_dir, init_checkpoint=None, version: str = "", progress: bool = True,
                 step_offset: int = 0) -> TrainResult:
    """Train `recipe` (a normalised dict) into `out_dir`; resume or return a finished run.

    In one process, or as one rank of a launched run (every rank calls it);
    to start the ranks from here, use `evo.train.launch.run_training`.
    `step_offset`: where this run sits in a longer schedule. Step s draws the
    prompts and sampling seeds of schedule step `step_offset + s`, so a run
    continued from a checkpoint of `step_offset` steps sees new prompts rather
    than replaying the first ones (the loop passes the steps behind the parent).
    """
    from evo.train.distributed import current
    from evo.train.trainer import Trainer

    ranks = current()
    out = Path(out_dir)
    if ranks.main:
        out.mkdir(parents=True, exist_ok=True)
    ranks.barrier()
    rhash = recipe_hash(recipe)
    summary, ckpt, state = _existing_run(out, rhash)
    if summary is not None:
        return TrainResult(out, out / "checkpoint", summary)
    runner = Trainer(recipe, out, rhash=rhash, init_checkpoint=init_checkpoint, version=version,
                     resume_from=ckpt, resume_state=state, step_offset=step_offset)
    flag = _StopFlag()
    steps, every = runner.spec.grpo.steps, runner.spec.grpo.checkpoint_every
    with _deferred_interrupt(flag), _progress(progress and ranks.main, steps, runner.start_step) as advance:
        for step in range(runner.start_step, steps):
            metrics = runner.run_step(step)
            if ranks.main:
                advance(metrics)
            done = step + 1
            if done < steps and flag.seen(ranks):
                runner.save(done)
                raise KeyboardInterrupt(f"stopped after step {step}; rerun the same command to resume")
            if every and done % every == 0 and done < steps:
                runner.save(done)
    summary = runner.finish()
    return TrainResult(out, out / "checkpoint", summary)


@contextmanager
def _progress(enabled: bool, total: int, start: int):
    """A rich progress bar showing reward mean and dead-group ratio per step."""
    if not enabled:
        yield lambda metrics: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[info]}"))
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task("train", total=total, completed=start, info="")

        def advance(m: dict) -> None:
            info = (f"reward {m['reward/mean']:.3f}  dead {m['signal/dead_group_ratio']:.2f}  "
                    f"trunc {m['gen/truncated_frac']:.2f}  {m['time/step_s']:.2f}s/step")
            bar.update(task, advance=1, info=info)

        yield advance


def clear_run(out_dir) -> None:
    """Remove a run's artifacts (used by `evo train --restart`)."""
    from evo.train.trainer import PARTS_DIR

    out = Path(out_dir)
    for name in ("checkpoint", "checkpoint.old", "checkpoint.partial", PARTS_DIR):
        shutil.rmtree(out / name, ignore_errors=True)
    for name in ("rollouts.parquet", "metrics.jsonl", "eval.parquet", "eval.json", "summary.json"):
        (out / name).unlink(missing_ok=True)


def holds_run(out_dir) -> bool:
    """Whether `out_dir` holds a run, finished or resumable (a checkpoint, or its `.old` twin mid-swap)."""
    from evo.train.checkpoint import find_checkpoint

    out = Path(out_dir)
    return (out / "summary.json").exists() or find_checkpoint(out / "checkpoint") is not None


EXTENDED_FROM = "extended_from.json"  # in a run folder extend_run prepared: {run, steps}


def trains_as_now(folder) -> bool:
    """Whether a finished run started as a run starts now: from a base model, or from a checkpoint with the
    `optimizer_from` record of `evo.train.checkpoint.adopt_optimizer`. A run trained from a checkpoint before
    runs took their start's AdamW moments began with a fresh optimizer: it is not the run a control trains
    now, so it is neither extended nor shared."""
    from evo.train.records import read_json_if

    summary = read_json_if(Path(folder) / "summary.json") or {}
    return not summary.get("init_checkpoint") or "optimizer_from" in summary


def extend_run(source, out_dir, recipe: dict, source_recipe: dict | None = None, *, version: str | None = None) -> int | None:
    """Make `out_dir` the finished run in `source`, ready to resume as the longer run `recipe`; its steps, or None.

    A run of S steps, resumed from its final checkpoint (weights, optimizer,
    RNG, schedule offset) and trained on to T steps, is exactly the run trained
    T steps at once when the recipe is otherwise the same and every step's
    learning rate does not depend on T (a constant schedule, warmup or not;
    linear and cosine decay over T, so their first S steps differ). Then the
    T-step run costs T - S steps. Returns None, leaving `out_dir` alone, when
    `source` is not such a run: unfinished, not shorter, another recipe, a
    T-dependent schedule, or a DeepSpeed checkpoint (its partitions are its
    own; such a run trains afresh). `source_recipe` (default `recipe` under the
    source's steps) is what trained `source`, checked against its recipe hash;
    it may differ from `recipe` in `eval` alone, which no training step reads (a
    file path such as a copied rubric counts as a difference). `version`: the
    name the longer run records on its rollouts (every row of a run carries its
    run's name, the first S steps' too).

    `source` is never written: the checkpoint is hard-linked where the
    filesystem allows (a save replaces the folder by rename), the files a
    resumed run rewrites in place (metrics.jsonl, a model judge's cache) are
    copied, and rollouts.parquet is split back into the per-step shards a run
    keeps. `out_dir/EXTENDED_FROM` names the run and the steps it held.
    """
    import json

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from evo.train.checkpoint import STATE_JSON, find_checkpoint, read_state
    from evo.train.judge_model import CACHE_FILE
    from evo.train.records import read_json_if
    from evo.train.schedule import rate_ignores_length
    from evo.train.trainer import PARTS_DIR

    source, out = Path(source), Path(out_dir)
    summary = read_json_if(source / "summary.json")
    grpo = recipe["grpo"]
    if summary is None or not rate_ignores_length(grpo) or not trains_as_now(source):
        return None
    held = int(summary.get("steps") or 0)
    source_recipe = source_recipe or dict(recipe, grpo=dict(grpo, steps=held))

    def training(r):  # what a training step reads: all but eval, under any step count
        return {**{k: v for k, v in r.items() if k != "eval"}, "grpo": dict(r["grpo"], steps=None)}

    ckpt = find_checkpoint(source / "checkpoint")
    if not 0 < held < int(grpo["steps"]) or int(source_recipe["grpo"]["steps"]) != held or ckpt is None \
            or summary.get("recipe_hash") != recipe_hash(source_recipe) or training(source_recipe) != training(recipe):
        return None
    state = read_state(ckpt)
    if int(state.get("step", -1)) != held or state.get("optimizer") is None:
        return None
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "checkpoint").mkdir(parents=True)
    (partial / EXTENDED_FROM).write_text(json.dumps({"run": str(source), "steps": held}) + "\n", encoding="utf-8")
    for path in ckpt.iterdir():
        if path.is_file() and path.name != STATE_JSON:
            try:
                os.link(path, partial / "checkpoint" / path.name)
            except OSError:
                shutil.copy2(path, partial / "checkpoint" / path.name)
    state.update(recipe_hash=recipe_hash(recipe), finished=False)
    (partial / "checkpoint" / STATE_JSON).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    for name in ("metrics.jsonl", CACHE_FILE):
        if (source / name).is_file():
            shutil.copy2(source / name, partial / name)
    rollouts = pq.read_table(source / "rollouts.parquet")
    if version is not None:
        column = rollouts.schema.get_field_index("version")
        rollouts = rollouts.set_column(column, "version", pa.array([version] * rollouts.num_rows, type=pa.string()))
    (partial / PARTS_DIR).mkdir()
    for step in range(held):
        pq.write_table(rollouts.filter(pc.equal(rollouts["step"], step)), partial / PARTS_DIR / f"step-{step:06d}.parquet")
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, out)
    return held
