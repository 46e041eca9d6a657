"""Does the loop keep learning? The loop's head against the hand-written recipe at equal compute.

From the ample baseline (`recipes/arithmetic-tiny-ample.yaml`, room to answer, so
no truncation to fix), `evo init` + `evo run --steps 6`. Then the same recipe is
trained from the base model, statically, for

- **equal compute**: as many GRPO steps as the loop trained in all (v0, the
  noise-floor calibration runs, every control and candidate; a continue-training
  version reuses its control's run), and
- **equal path**: as many steps as lie on the promoted path from v0 to the head
  (what the head's own policy was trained for),

and each is compared with the loop's head (stratified paired bootstrap, the
workspace's seed-noise floor, both sides one training draw). Goal: the head is
not below the static run at equal compute (the interval's upper end >= 0). The
gap at equal path steps is reported beside it. Ends with one JSON line.

    python bench/keeps_learning.py [--steps 6] [--dir PATH]
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
ROOT = Path(__file__).resolve().parents[1]


def evo(*args) -> str:
    proc = subprocess.run([*EVO, *map(str, args)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"evo {' '.join(map(str, args))} failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="evo run --steps")
    parser.add_argument("--dir", type=Path, default=None, help="keep the workspace and runs here")
    args = parser.parse_args()

    from evo.harness.compare import compare_runs
    from evo.lineage import Lineage
    from evo.loop import gate as gating
    from evo.loop import runs as R
    from evo.loop import versions as V
    from evo.settings import artifact_dir, load_settings
    from evo.train.run import train_recipe

    work = args.dir or Path(tempfile.mkdtemp(prefix="evo-bench-keeps-learning-"))
    shutil.rmtree(work, ignore_errors=True)
    ws, extra = work / "ws", work / "static"
    extra.mkdir(parents=True)
    evo("init", ws, "--recipe", ROOT / "recipes" / "arithmetic-tiny-ample.yaml")
    run = json.loads(evo("run", "-C", ws, "--steps", args.steps, "--json"))

    lineage = Lineage.open(ws)
    settings = load_settings(ws)
    records = lineage.read_all()
    noise = R.workspace_noise(records)
    B = int(settings["search"]["bootstrap_samples"])
    head = V.promoted_head(records)
    v0 = V.recipe_of(lineage, "v0")
    total = gating.spent(records)["grpo_steps"]
    on_path = V.schedule_end(records, head)  # the steps behind the head's policy, each continuation's own length

    def static(steps: int) -> dict:
        out = extra / f"steps{steps}"
        train_recipe(dict(v0, grpo=dict(v0["grpo"], steps=steps)), out, progress=False)
        cmp = compare_runs(artifact_dir(ws, settings, head), out, B=B, noise=noise)
        return {"steps": steps, "static_avg_at_k": cmp["baseline_value"], "delta": cmp["delta"],
                "ci_low": cmp["ci_low"], "ci_high": cmp["ci_high"], "outcome": cmp["outcome"]}

    equal_compute = static(total)
    equal_path = static(on_path) if on_path != total else equal_compute
    path = []
    name = head
    while name in records:
        rec = records[name]
        iv = (rec.last("created") or {}).get("intervention")
        path.append({"version": name, "intervention": (iv.get("change") if isinstance(iv, dict) else iv) or "baseline",
                     "outcome": rec.outcome})
        name = (rec.parents or [None])[0]
    result = {
        "bench": "keeps_learning", "workspace": str(ws), "steps": args.steps,
        "statuses": [s["status"] for s in run["steps"]], "stopped": run.get("stopped", ""),
        "head": head, "head_avg_at_k": equal_compute["delta"] + equal_compute["static_avg_at_k"],
        "v0_avg_at_k": records["v0"].avg_at_k, "promoted_path": list(reversed(path)),
        "grpo_steps_in_all": total, "grpo_steps_on_path": on_path,
        "head_vs_static_equal_compute": equal_compute, "head_vs_static_equal_path": equal_path,
        "noise": noise.to_dict() if noise else None,
        "goal": "head - static at equal compute: interval not below 0 (ci_high >= 0)",
    }
    result["met"] = equal_compute["ci_high"] >= 0
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
