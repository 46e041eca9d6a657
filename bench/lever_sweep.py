"""Is any lever in the skill library worth more than training longer? Every policy skill, applied blind.

The loop can only beat "v0's recipe trained for as many steps as the loop
spent" (`bench/domains_evolution.py`) if some intervention gains more than the
extra steps the loop spends on measuring (calibration replicates, controls,
seeds). This bench asks that question without the loop and without any
diagnosis: on one recipe (calc-tiny by default) it applies each built-in policy
skill's patch whose `requires` the recipe meets (a patch that reads a
diagnosis metric, `scale ... toward`, is skipped and listed), and trains, from
the base model under the same S seeds:

- v0's recipe for N steps and for 2N steps;
- each lever's recipe for N steps.

For each lever it prints the mean Avg@k over seeds and the seed-paired
difference against v0 at N and at 2N steps (mean and 95% t-interval over
seeds). Goal: some lever at N steps beats v0's recipe at 2N steps (interval
above 0): a lever worth more than doubling the steps. Ends with one JSON line.

    python bench/lever_sweep.py [--recipe recipes/calc-tiny.yaml] [--steps 60] [--seeds 4] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def levers(raw: dict) -> tuple[dict[str, dict], dict[str, str]]:
    """name -> the recipe a policy skill's patch makes of `raw`; name -> why a skill was left out."""
    from evo.agent.conditions import check_requirement, patched, recipe_view
    from evo.agent.skills import load_skills
    from evo.errors import EvoError

    current = recipe_view(raw)
    domain = current["domain"]["name"]
    made, skipped = {}, {}
    for skill in load_skills():
        if skill.kind != "policy" or not skill.patch or not skill.applies_to(domain):
            continue
        if any(op.get("path") == "grpo.steps" for op in skill.patch):
            skipped[skill.name] = "its lever is the step count, which this bench holds fixed (the 'v0 x2 steps' row)"
            continue
        if not all(check_requirement(r, current) for r in skill.requires):
            skipped[skill.name] = "the recipe does not meet its requirements"
            continue
        try:
            new_raw, _, diff = patched(raw, current, skill.patch, source=f"skill {skill.name}")
        except EvoError as exc:
            skipped[skill.name] = str(exc).split(": ", 1)[-1]
            continue
        if not diff:
            skipped[skill.name] = "its patch changes nothing here"
            continue
        made[skill.name] = new_raw
    return made, skipped


def _train(job: tuple[str, dict, int, int, str]) -> tuple[str, int, float]:
    name, raw, steps, seed, out = job
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from evo.loop.runs import with_seed
    from evo.train.run import train_recipe

    recipe = with_seed(raw, seed)
    recipe["grpo"] = dict(recipe["grpo"], steps=steps)
    train_recipe(recipe, Path(out), progress=False)
    return name, seed, float(json.loads((Path(out) / "eval.json").read_text())["avg_at_k"])


def paired(a: list[float], b: list[float]) -> dict:
    """Mean of a - b over seeds, with its 95% t-interval."""
    from evo.harness.stats import seed_paired_t

    delta, half = seed_paired_t(a, b)
    half = float("inf") if half is None else half
    return {"delta": delta, "ci_low": delta - half, "ci_high": delta + half}


def main() -> None:
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", type=Path, default=ROOT / "recipes" / "calc-tiny.yaml")
    parser.add_argument("--steps", type=int, default=60, help="N: steps of each lever's run (v0 also gets 2N)")
    parser.add_argument("--seeds", type=int, default=4, help="training seeds per configuration (recipe seed, +1, ...)")
    parser.add_argument("--workers", type=int, default=2, help="runs trained at once, one thread each")
    parser.add_argument("--only", default="", help="comma-separated skill names (default: every applicable one)")
    parser.add_argument("--dir", type=Path, default=None, help="keep the runs here")
    args = parser.parse_args()

    raw = yaml.safe_load(args.recipe.read_text())
    made, skipped = levers(raw)
    if args.only:
        wanted = set(args.only.split(","))
        made = {k: v for k, v in made.items() if k in wanted}
    seeds = [int(raw.get("seed", 0)) + i for i in range(args.seeds)]
    work = args.dir or Path(tempfile.mkdtemp(prefix="evo-bench-levers-"))
    work.mkdir(parents=True, exist_ok=True)
    configs = {"v0": (raw, args.steps), "v0 x2 steps": (raw, 2 * args.steps)}
    configs.update({name: (r, args.steps) for name, r in made.items()})
    jobs = [(name, r, steps, s, str(work / f"{name.replace(' ', '_')}-seed{s}"))
            for name, (r, steps) in configs.items() for s in seeds]
    print(f"{len(configs)} configurations x {len(seeds)} seeds on {args.recipe.name} ({len(skipped)} skills left out)",
          file=sys.stderr)
    scores: dict[str, dict[int, float]] = {}
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for i, (name, seed, value) in enumerate(pool.map(_train, jobs), 1):
            scores.setdefault(name, {})[seed] = value
            print(f"[{i}/{len(jobs)}] {name} seed {seed}: Avg@k {value:.3f}", file=sys.stderr)
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)

    def column(name):
        return [scores[name][s] for s in seeds]

    out = {}
    for name in configs:
        values = column(name)
        row = {"steps": configs[name][1], "avg_at_k": sum(values) / len(values), "per_seed": values}
        if name != "v0":
            row["vs_v0"] = paired(values, column("v0"))
        if name not in ("v0", "v0 x2 steps"):
            row["vs_v0_x2_steps"] = paired(values, column("v0 x2 steps"))
        out[name] = row
        vs = "".join(f"; vs {ref} {row[key]['delta']:+.3f} [{row[key]['ci_low']:+.3f}, {row[key]['ci_high']:+.3f}]"
                     for key, ref in (("vs_v0", "v0"), ("vs_v0_x2_steps", "v0 x2")) if key in row)
        print(f"{name:34s} {row['avg_at_k']:.3f} at {row['steps']} steps{vs}", file=sys.stderr)
    worth = sorted(n for n, r in out.items() if r.get("vs_v0_x2_steps", {}).get("ci_low", -1) > 0)
    print(json.dumps({"bench": "lever_sweep", "recipe": args.recipe.name, "steps": args.steps, "seeds": seeds,
                      "configurations": out, "left_out": skipped, "worth_more_than_doubling": worth,
                      "goal": "some lever at N steps beats v0's recipe at 2N steps (seed-paired 95% interval above 0)",
                      "met": bool(worth)}))


if __name__ == "__main__":
    main()
