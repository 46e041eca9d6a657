"""Are the loop's verdicts evidence? Attribution, seed luck and the static peer, measured.

On a fresh embedded-default workspace (`evo init`, then `evo run --steps 4`):

1. **improvements** — every `improvement` verdict the loop gave a candidate.
2. **survive** — each is checked again against an *independent* re-training of
   its counterfactual under another seed: a candidate judged against its
   control is compared with a control trained again under seed + 100; a
   continue-training version (whose counterfactual is its parent) is trained
   again under seed + 100 and compared with its parent. It survives when the
   new comparison is still `improvement` (same statistics, same noise floor).
3. **A/A** — v0's recipe trained from the base model under 2 x PAIRS seeds and
   compared pairwise (seed 1000+2i against 1000+2i+1) with the workspace's
   noise floor: how often two seeds of one recipe come out `improvement`
   (false-improvement rate), and how often anything but `insufficient`.
4. **static peer** — v0's recipe trained from the base model for as many GRPO
   steps as the loop trained in all (v0, calibration replicates, controls,
   candidates; a continue-training version reuses its control and adds none),
   compared with the promoted head (paired, both one training draw).

Goals: every improvement survives; the A/A false-improvement rate <= 5%; the
head beats the static recipe at equal steps (interval above 0). Ends with one
JSON line.

    python bench/attribution.py [--pairs 20] [--steps 4] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

EVO = [sys.executable, "-c", "from evo.cli import main; main()"]


def evo(*args, capture=True) -> str:
    proc = subprocess.run([*EVO, *map(str, args)], capture_output=capture, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"evo {' '.join(map(str, args))} failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc.stdout or ""


def train(recipe: dict, out: Path, init=None, offset: int = 0) -> Path:
    """One run; `offset`: where it sits in its parent's prompt schedule, as the loop trains it."""
    from evo.train.run import train_recipe

    train_recipe(recipe, out, init_checkpoint=init, progress=False, step_offset=offset)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=20, help="A/A seed pairs (>= 20 for the goal)")
    parser.add_argument("--steps", type=int, default=4, help="evo run --steps")
    parser.add_argument("--dir", type=Path, default=None, help="keep the workspace and runs here")
    args = parser.parse_args()

    from evo.harness.compare import compare_runs
    from evo.lineage import Lineage
    from evo.loop import gate as gating
    from evo.loop import runs as R
    from evo.loop import versions as V
    from evo.settings import artifact_dir, load_settings

    work = args.dir or Path(tempfile.mkdtemp(prefix="evo-bench-attribution-"))
    ws, extra = work / "ws", work / "extra"
    shutil.rmtree(work, ignore_errors=True)
    extra.mkdir(parents=True)
    evo("init", ws)
    evo("run", "-C", ws, "--steps", args.steps, "--json")

    lineage = Lineage.open(ws)
    settings = load_settings(ws)
    records = lineage.read_all()
    noise = R.workspace_noise(records)
    B = int(settings["search"]["bootstrap_samples"])
    v0_recipe = V.recipe_of(lineage, "v0")

    # 1-2. improvements, re-judged against an independent re-training of their counterfactual
    checks = []
    trained_steps = gating.spent(records)["grpo_steps"]
    for rec in sorted(records.values(), key=lambda r: r.number):
        judged = rec.last("judged")
        if not rec.parents or not judged or judged["outcome"] != "improvement":
            continue
        parent = rec.parents[0]
        recipe = V.recipe_of(lineage, rec.name)
        parent_recipe = V.recipe_of(lineage, parent)
        init = V.checkpoint_of(ws, settings, parent)
        offset = V.schedule_end(records, parent)  # the loop continues the parent's prompt schedule; so does the redo
        seed = int(recipe["seed"]) + 100
        against = (judged.get("attributed") or {}).get("against")
        if against == "control":
            steps = R.control_steps(parent_recipe, recipe, rec.last("created")["intervention"] or {})
            redo = train(R.control_recipe(parent_recipe, steps, seed), extra / f"{rec.name}-control-seed{seed}", init, offset)
            again = compare_runs(artifact_dir(ws, settings, rec.name), redo, B=B, noise=noise)
        else:  # continue-training (or a bootstrap): its counterfactual is the parent; train the version again
            redo = train(R.with_seed(recipe, seed), extra / f"{rec.name}-seed{seed}", init, offset)
            again = compare_runs(redo, artifact_dir(ws, settings, parent), B=B, noise=noise, parent_seeds=None)
        checks.append({"version": rec.name, "against": against, "outcome_again": again["outcome"],
                       "delta": judged["headline"]["delta"], "delta_again": again["delta"],
                       "ci_again": [again["ci_low"], again["ci_high"]]})

    # 3. A/A: two seeds of v0's recipe from the base model
    aa = []
    for i in range(args.pairs):
        a = train(R.with_seed(v0_recipe, 1000 + 2 * i), extra / f"aa-{2 * i}")
        b = train(R.with_seed(v0_recipe, 1000 + 2 * i + 1), extra / f"aa-{2 * i + 1}")
        aa.append(compare_runs(a, b, B=B, noise=noise)["outcome"])
    false_improvement = sum(o == "improvement" for o in aa) / len(aa)
    not_insufficient = sum(o != "insufficient" for o in aa) / len(aa)

    # 4. the promoted head against v0's recipe trained from the base model for the same total steps
    head = V.promoted_head(records)
    static_recipe = dict(v0_recipe, grpo=dict(v0_recipe["grpo"], steps=trained_steps))
    static = train(static_recipe, extra / f"static-{trained_steps}")
    peer = compare_runs(artifact_dir(ws, settings, head), static, B=B, noise=noise)

    survive = sum(c["outcome_again"] == "improvement" for c in checks)
    result = {
        "bench": "attribution", "workspace": str(ws), "steps": args.steps,
        "noise": noise.to_dict() if noise else None,
        "improvements": len(checks), "survive": survive, "checks": checks,
        "aa_pairs": len(aa), "aa_false_improvement_rate": false_improvement, "aa_not_insufficient_rate": not_insufficient,
        "head": head, "head_avg_at_k": peer["value"], "static_steps": trained_steps, "static_avg_at_k": peer["baseline_value"],
        "head_vs_static": {"outcome": peer["outcome"], "delta": peer["delta"], "ci_low": peer["ci_low"], "ci_high": peer["ci_high"]},
        "goals": {"every_improvement_survives": survive == len(checks), "aa_false_improvement_rate_max": 0.05,
                  "head_beats_static": peer["ci_low"] > 0},
    }
    result["met"] = survive == len(checks) and false_improvement <= 0.05 and peer["ci_low"] > 0
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
