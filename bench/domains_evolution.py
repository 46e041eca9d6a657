"""The loop across the embedded domains: does the head beat its v0 recipe at equal steps, and what was retained?

For each embedded domain (arithmetic, calc, patch), on a fresh workspace
(`evo init --domain D`, default settings, the heuristic agent), `evo run
--steps N` from the domain's plain v0; then:

1. **v0 and head** — Avg@k of v0 and of the promoted head, as the loop recorded them;
2. **head vs static** — v0's recipe trained from the base model for as many
   GRPO steps as the loop trained in all (v0, its calibration replicates,
   controls, candidates; a continue-training version reuses its control and
   adds none), compared with the promoted head (paired bootstrap over tasks,
   both one training draw, widened by the workspace's measured noise floor);
3. **retained** — the interventions on the promoted path, v0 to the head;
4. **skills** — every skill the agent used (`skill_used` events), retained or not.

Goal: on every domain the head beats the static recipe at equal steps
(interval above 0). The retained paths are reported as they come out; the
bench does not ask them to differ. Ends with one JSON line.

    python bench/domains_evolution.py [--steps 5] [--domains arithmetic,calc,patch] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attribution import evo, train  # noqa: E402  (the same subprocess and training helpers)

EMBEDDED = ("arithmetic", "calc", "patch")


def promoted_path(records: dict, head: str) -> list[str]:
    """v0 ... head along first parents."""
    path = [head]
    while records[path[-1]].parents:
        path.append(records[path[-1]].parents[0])
    return path[::-1]


def retained(records: dict, path: list[str]) -> list[dict]:
    out = []
    for name in path[1:]:
        created = records[name].last("created") or {}
        iv = created.get("intervention") or {}
        judged = records[name].last("judged") or {}
        out.append({"version": name, "kind": iv.get("kind"), "factor": iv.get("factor"), "change": iv.get("change"),
                    "skill": iv.get("skill"), "outcome": judged.get("outcome")})
    return out


def run_domain(domain: str, steps: int, work: Path) -> dict:
    from evo.harness.compare import compare_runs
    from evo.lineage import Lineage
    from evo.loop import gate as gating
    from evo.loop import runs as R
    from evo.loop import versions as V
    from evo.settings import artifact_dir, load_settings

    ws = work / domain
    start = time.time()
    evo("init", ws, "--domain", domain)
    evo("run", "-C", ws, "--steps", steps, "--json")
    loop_s = time.time() - start

    lineage = Lineage.open(ws)
    settings = load_settings(ws)
    records = lineage.read_all()
    noise = R.workspace_noise(records)
    head = V.promoted_head(records)
    path = promoted_path(records, head)
    total_steps = gating.spent(records)["grpo_steps"]
    v0_recipe = V.recipe_of(lineage, "v0")
    static = train(dict(v0_recipe, grpo=dict(v0_recipe["grpo"], steps=total_steps)), work / f"{domain}-static")
    peer = compare_runs(artifact_dir(ws, settings, head), static, B=int(settings["search"]["bootstrap_samples"]),
                        noise=noise)
    skills = sorted({e["skill"] for rec in records.values() for e in rec.events if e["event"] == "skill_used"})
    return {
        "versions": len(records), "head": head, "loop_s": round(loop_s, 1),
        "v0_avg_at_k": records["v0"].avg_at_k, "head_avg_at_k": records[head].avg_at_k,
        "grpo_steps": total_steps, "static_avg_at_k": peer["baseline_value"],
        "head_vs_static": {"outcome": peer["outcome"], "delta": peer["delta"], "ci_low": peer["ci_low"],
                           "ci_high": peer["ci_high"], "noise_floor": peer["noise_floor"]},
        "retained": retained(records, path), "skills_used": skills,
        "outcomes": {name: rec.outcome for name, rec in sorted(records.items(), key=lambda kv: kv[1].number)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="evo run --steps per domain")
    parser.add_argument("--domains", default=",".join(EMBEDDED), help="comma-separated embedded domains")
    parser.add_argument("--dir", type=Path, default=None, help="keep the workspaces and runs here")
    args = parser.parse_args()

    work = args.dir or Path(tempfile.mkdtemp(prefix="evo-bench-domains-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results = {}
    for domain in args.domains.split(","):
        results[domain] = r = run_domain(domain, args.steps, work)
        h = r["head_vs_static"]
        path = " -> ".join(f"{x['version']} {x['factor']}" for x in r["retained"]) or "(v0 only)"
        print(f"{domain}: v0 {r['v0_avg_at_k']:.3f} -> head {r['head']} {r['head_avg_at_k']:.3f}; static v0 recipe "
              f"at {r['grpo_steps']} steps {r['static_avg_at_k']:.3f}: delta {h['delta']:+.3f} "
              f"[{h['ci_low']:+.3f}, {h['ci_high']:+.3f}] ({h['outcome']}); retained: {path}; "
              f"skills: {', '.join(r['skills_used']) or '-'}; loop {r['loop_s']:.0f}s", file=sys.stderr)
    paths = {d: tuple((x["factor"], x["change"]) for x in r["retained"]) for d, r in results.items()}
    out = {"bench": "domains_evolution", "steps": args.steps, "workspaces": str(work), "domains": results,
           "retained_paths_differ": len(set(paths.values())) == len(paths),
           "goal": "head beats the v0 recipe at equal GRPO steps (ci_low > 0) on every domain",
           "met": all(r["head_vs_static"]["ci_low"] > 0 for r in results.values())}
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
