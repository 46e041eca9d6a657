"""Does a version gain more when it trains on with its parent's AdamW moments than with a fresh optimizer?

A child version trains on from its parent's checkpoint. With a fresh AdamW its
first updates have no second-moment estimate (each about lr times the
gradient's sign); with the parent's moments (`evo.train.checkpoint.
adopt_optimizer`, what every child does) it carries on as one long run would.
This trains a recipe's v0 (seed 0, from the base model), then continues it for
as many steps again under `--seeds` training seeds twice: from the checkpoint
(the moments adopted) and from a weights-only copy of it (a fresh optimizer),
both continuing v0's prompt schedule. Reports Avg@k of v0 and of each
continuation, and the paired difference (adopted - fresh, same seed) with a
95% t interval over seeds.

    .venv/bin/python bench/optimizer_carry.py [--recipe recipes/calc-tiny.yaml] [--seeds 6] [--dir PATH]

Goal: the adopted continuations score higher on average (mean difference > 0).
Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "calc-tiny.yaml")
    parser.add_argument("--seeds", type=int, default=6, help="continuation seeds (0..N-1)")
    parser.add_argument("--dir", type=Path, default=None, help="keep the runs here (default: a temporary folder, removed)")
    args = parser.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="evo-bench-optimizer-carry-"))
    try:
        report(args, work)
    finally:
        if args.dir is None:  # 13 runs with checkpoints: not left on a shared disk
            shutil.rmtree(work, ignore_errors=True)


def report(args, work: Path) -> None:
    import numpy as np

    from evo.harness.stats import seed_paired_t
    from evo.loop.runs import with_seed
    from evo.recipe import load_recipe
    from evo.train.checkpoint import STATE_JSON, STATE_TENSORS
    from evo.train.run import train_recipe

    recipe = load_recipe(args.recipe)
    steps = int(recipe["grpo"]["steps"])
    parent = train_recipe(with_seed(recipe, 0), work / "v0", version="v0", progress=False)
    weights_only = work / "v0-weights-only"
    if not weights_only.exists():
        shutil.copytree(parent.checkpoint_dir, weights_only, ignore=shutil.ignore_patterns(STATE_JSON, STATE_TENSORS))

    def continued(start: Path, seed: int, name: str) -> float:
        run = train_recipe(with_seed(recipe, seed), work / f"{name}-seed{seed}", init_checkpoint=start,
                           version=name, progress=False, step_offset=steps)
        return float(run.summary["eval"]["avg_at_k"])

    adopted = [continued(parent.checkpoint_dir, s, "adopted") for s in range(args.seeds)]
    fresh = [continued(weights_only, s, "fresh") for s in range(args.seeds)]
    delta, half = seed_paired_t(adopted, fresh)
    v0 = float(parent.summary["eval"]["avg_at_k"])
    print(f"{recipe['name']}: v0 {v0:.3f}; {steps} more steps under {args.seeds} seeds: "
          f"adopted moments {np.mean(adopted):.3f}, fresh optimizer {np.mean(fresh):.3f}; "
          f"paired difference {delta:+.3f}" + (f" ± {half:.3f}" if half is not None else ""))
    print(json.dumps({"bench": "optimizer_carry", "recipe": recipe["name"], "runs": str(args.dir) if args.dir else None, "steps": steps,
                      "v0_avg_at_k": v0, "adopted": adopted, "fresh": fresh,
                      "adopted_mean": float(np.mean(adopted)), "fresh_mean": float(np.mean(fresh)),
                      "paired_delta": delta, "paired_half_width_95": half,
                      "goal": "adopted mean > fresh mean", "met": bool(delta > 0)}))


if __name__ == "__main__":
    main()
