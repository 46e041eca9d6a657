"""Data-parallel GRPO throughput: trajectories per second at 1 and 2 ranks, one CPU thread each.

The same recipe (the embedded default: tiny-char on arithmetic, 32 prompts x 8
samples per step) is trained by `evo train --nproc 1` and by `evo train
--nproc 2` (torchrun, gloo, DDP), each process limited to one thread
(OMP_NUM_THREADS=1), so 2 ranks use 2 cores where 1 rank uses one. The two
runs sample the same trajectories (a rank samples its groups exactly as one
process would), so they do the same work; the bench checks that their step
rewards are equal. Throughput counts the steady steps only: trajectories of
steps 1..N-1 over the sum of their `time/step_s` on rank 0 (which includes
waiting for the other rank and gathering its rows), leaving out step 0
(first-call warm-up) and process start-up. Runs alternate for `--rounds`
rounds so machine load drifts equally on both; the figure is the total over
rounds.

The ceiling, measured in the same rounds: two independent `--nproc 1` runs of
the same recipe at once (no communication at all), their summed steady
throughput (the mean over rounds) over the one-rank figure. It is what two one-thread processes get
out of this machine's two vCPUs; when it is below the goal, no data-parallel
code can meet the goal here, and `ratio / ceiling` says how much of what the
machine allows the 2-rank run reaches.

Where the time goes, per steady step: the whole step, its `time/generate_s`
(sampling) and `time/train_s` (the update, the synced backward included) as
rank 0 records them, and the rest (scoring, gathering rows, writing), for the
one-rank run, the two-rank run and one of the two runs at once. Sampling that
does not halve with half the rows, and training that is slower per row with
both cores busy, are what keep the ratio below 2. `ratio_if_update_split_perfectly`
is the 2-rank step with its training phase replaced by half of what one of the
two independent runs trained in: what a perfect split of the update alone
could reach, with sampling and the rest as measured.

    .venv/bin/python bench/data_parallel.py [--rounds 2] [--steps 5]

Ends with one JSON line: figures, the goal (ratio >= 1.6 at 2 ranks) and "met".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

GOAL_RATIO = 1.6
PROMPTS, SAMPLES = 32, 8
PHASES = ("generate", "train")  # the parts of `time/step_s` each step records (the rest: scoring, gathering, writing)


def recipe(steps: int) -> dict:
    return {
        "name": "bench-data-parallel", "seed": 0,
        "domain": {"name": "arithmetic"},
        "model": {"name": "builtin:tiny-char"},
        "rollout": {"prompts_per_step": PROMPTS, "num_generations": SAMPLES, "max_new_tokens": 12},
        "grpo": {"steps": steps, "learning_rate": 0.0005, "micro_batch_size": 64},
        "eval": {"k": 1, "max_tasks": 8},
    }


def _start(path: Path, out: Path, nproc: int) -> subprocess.Popen:
    evo = str(Path(sys.executable).with_name("evo"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.Popen([evo, "train", str(path), "--out", str(out), "--nproc", str(nproc), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _finish(proc: subprocess.Popen, out: Path, nproc: int) -> tuple[float, int, list[float], dict]:
    """(steady seconds, steady trajectories, per-step reward means, steady seconds per phase) of one `evo train`."""
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"evo train --nproc {nproc} failed: {(stderr or stdout).strip().splitlines()[-1]}")
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steady = metrics[1:]
    phases = {phase: sum(m[f"time/{phase}_s"] for m in steady) for phase in PHASES}
    return (sum(m["time/step_s"] for m in steady), len(steady) * PROMPTS * SAMPLES,
            [m["reward/mean"] for m in metrics], phases)


def train(path: Path, out: Path, nproc: int) -> tuple[float, int, list[float], dict, float]:
    """(steady seconds, steady trajectories, per-step reward means, seconds per phase, wall seconds) of one run."""
    t0 = time.perf_counter()
    result = _finish(_start(path, out, nproc), out, nproc)
    return (*result, time.perf_counter() - t0)


def two_at_once(path: Path, outs: tuple[Path, Path]) -> tuple[float, list[tuple[float, dict]]]:
    """Two independent one-rank runs at once: their combined steady trajectories/s (running together, rates add),
    and each run's (steady seconds, seconds per phase)."""
    procs = [_start(path, out, 1) for out in outs]
    done = [_finish(p, out, 1) for p, out in zip(procs, outs)]
    return sum(trajectories / seconds for seconds, trajectories, _, _ in done), [(d[0], d[3]) for d in done]


def per_step(seconds: float, phases: dict, steps: int) -> dict:
    """Mean seconds per steady step: the whole step, each recorded phase, and the rest."""
    out = {"step": seconds / steps, **{phase: phases[phase] / steps for phase in PHASES}}
    out["other"] = out["step"] - sum(out[phase] for phase in PHASES)
    return {k: round(v, 4) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="evo-bench-dp-"))
    path = work / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe(args.steps)))
    totals = {1: [0.0, 0, 0.0], 2: [0.0, 0, 0.0]}
    phase_totals = {key: dict.fromkeys(PHASES, 0.0) for key in (1, 2, "pair")}
    pair_seconds = 0.0
    pair_rates = []  # two one-rank runs at once: their combined trajectories/s, per round
    same_work = True
    try:
        for r in range(args.rounds):
            rewards = {}
            for nproc in (1, 2):
                seconds, trajectories, rewards[nproc], phases, wall = train(path, work / f"run-{r}-{nproc}", nproc)
                for phase in PHASES:
                    phase_totals[nproc][phase] += phases[phase]
                totals[nproc][0] += seconds
                totals[nproc][1] += trajectories
                totals[nproc][2] += wall
                print(f"round {r}: {nproc} rank(s): {trajectories / seconds:7.1f} trajectories/s "
                      f"(steady steps {seconds:.2f} s, process wall {wall:.1f} s)")
            same_work &= rewards[1] == rewards[2]
            rate_together, each = two_at_once(path, (work / f"pair-{r}-a", work / f"pair-{r}-b"))
            pair_rates.append(rate_together)
            for seconds, phases in each:
                pair_seconds += seconds
                for phase in PHASES:
                    phase_totals["pair"][phase] += phases[phase]
            print(f"round {r}: two one-rank runs at once: {pair_rates[-1]:7.1f} trajectories/s together")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rate = {n: totals[n][1] / totals[n][0] for n in (1, 2)}
    steady_steps = args.rounds * (args.steps - 1)  # per run
    seconds_per_step = {
        "1_rank": per_step(totals[1][0], phase_totals[1], steady_steps),
        "2_ranks": per_step(totals[2][0], phase_totals[2], steady_steps),
        "one_of_two_at_once": per_step(pair_seconds, phase_totals["pair"], 2 * steady_steps),
    }
    # The 2-rank step as measured, but with its training phase exactly half of what one of two independent runs
    # trains in (both cores busy): how far a perfect split of the update alone could take the ratio.
    two = seconds_per_step["2_ranks"]
    perfect_split = seconds_per_step["1_rank"]["step"] / (
        two["step"] - two["train"] + seconds_per_step["one_of_two_at_once"]["train"] / 2)
    ratio = rate[2] / rate[1]
    ceiling = sum(pair_rates) / len(pair_rates) / rate[1]
    print(f"1 rank: {rate[1]:.1f} trajectories/s; 2 ranks: {rate[2]:.1f} trajectories/s; "
          f"ratio {ratio:.2f} (goal >= {GOAL_RATIO}); same trajectories: {same_work}")
    print(f"ceiling: two independent one-rank runs at once reach {ceiling:.2f}x one alone; "
          f"the 2-rank run reaches {ratio / ceiling:.0%} of it")
    print(f"with the update split perfectly over the ranks (sampling and the rest as measured): {perfect_split:.2f}x")
    for name, parts in seconds_per_step.items():
        print(f"seconds per steady step, {name.replace('_', ' ')}: "
              + ", ".join(f"{k} {v:.3f}" for k, v in parts.items()))
    print(json.dumps({
        "trajectories_per_s_1_rank": round(rate[1], 2), "trajectories_per_s_2_ranks": round(rate[2], 2),
        "ratio_2_vs_1_rank": round(ratio, 3), "goal_ratio": GOAL_RATIO,
        "ceiling_two_independent_runs": round(ceiling, 3), "share_of_ceiling": round(ratio / ceiling, 3),
        "wall_s_1_rank": round(totals[1][2], 1), "wall_s_2_ranks": round(totals[2][2], 1),
        "seconds_per_step": seconds_per_step, "ratio_if_update_split_perfectly": round(perfect_split, 3),
        "steps": args.steps, "rounds": args.rounds, "trajectories_per_step": PROMPTS * SAMPLES,
        "same_rewards": same_work, "cpus": os.cpu_count(),
        "met": bool(ratio >= GOAL_RATIO and same_work),
    }))


if __name__ == "__main__":
    main()
