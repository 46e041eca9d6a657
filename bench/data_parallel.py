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

Balancing, measured in the same rounds: a third run per round trains at 2 ranks
with `grpo.balance_ranks: true` (groups move between ranks to even out the
update, `evo.train.balance`; off by default), so its effect shows in its
`rank_wait`, its `balance` (the planning and transfer, part of the rest) and
its ratio next to the default's.

Where the time goes, per steady step: the whole step, its `time/generate_s`
(sampling) and `time/train_s` (the update, the synced backward included) as
rank 0 records them, and the rest (scoring, gathering rows, writing), for the
one-rank run, the two-rank run and one of the two runs at once; within the
update, `time/sync_s` (the gradient reduction's own cost) and
`time/rank_wait_s` (the first rank's wait for the other, whose shard took
longer). Sampling that
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
from dataclasses import dataclass
from pathlib import Path

import yaml

GOAL_RATIO = 1.6
PROMPTS, SAMPLES = 32, 8
PHASES = ("generate", "train")  # the parts of `time/step_s` each step records (the rest: scoring, gathering, writing)
WITHIN_TRAIN = ("sync", "rank_wait")  # parts of `time/train_s`: the gradient reduction, the wait for the other rank
WITHIN_OTHER = ("balance",)  # part of the rest: planning and moving groups between ranks (`evo.train.balance`)


def recipe(steps: int, balance: bool = False) -> dict:
    return {
        "name": "bench-data-parallel", "seed": 0,
        "domain": {"name": "arithmetic"},
        "model": {"name": "builtin:tiny-char"},
        "rollout": {"prompts_per_step": PROMPTS, "num_generations": SAMPLES, "max_new_tokens": 12},
        "grpo": {"steps": steps, "learning_rate": 0.0005, "micro_batch_size": 64, "balance_ranks": balance},
        "eval": {"k": 1, "max_tasks": 8},
    }


def _start(path: Path, out: Path, nproc: int) -> subprocess.Popen:
    evo = str(Path(sys.executable).with_name("evo"))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return subprocess.Popen([evo, "train", str(path), "--out", str(out), "--nproc", str(nproc), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@dataclass
class Run:
    """The steady steps (1..N-1) of one finished `evo train`, as rank 0 recorded them."""

    seconds: float  # sum of time/step_s
    trajectories: int
    rewards: list[float]  # reward/mean of every step
    phases: dict[str, float]  # sum of time/<phase>_s (PHASES, WITHIN_TRAIN, WITHIN_OTHER)
    moved: int = 0  # groups a rank trained for the other (dist/moved_groups), summed
    gain: float = 0.0  # the busiest rank's priced update shortened by (dist/balance_gain), summed
    wall: float = 0.0  # the process, start-up included

    @property
    def rate(self) -> float:
        return self.trajectories / self.seconds


def _finish(proc: subprocess.Popen, out: Path, nproc: int) -> Run:
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"evo train --nproc {nproc} failed: {(stderr or stdout).strip().splitlines()[-1]}")
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steady = metrics[1:]
    return Run(sum(m["time/step_s"] for m in steady), len(steady) * PROMPTS * SAMPLES,
               [m["reward/mean"] for m in metrics],
               {phase: sum(m[f"time/{phase}_s"] for m in steady) for phase in PHASES + WITHIN_TRAIN + WITHIN_OTHER},
               sum(m["dist/moved_groups"] for m in steady), sum(m["dist/balance_gain"] for m in steady))


def train(path: Path, out: Path, nproc: int) -> Run:
    t0 = time.perf_counter()
    run = _finish(_start(path, out, nproc), out, nproc)
    run.wall = time.perf_counter() - t0
    return run


def two_at_once(path: Path, outs: tuple[Path, Path]) -> list[Run]:
    """Two independent one-rank runs started together (running at once, their rates add)."""
    procs = [_start(path, out, 1) for out in outs]
    return [_finish(p, out, 1) for p, out in zip(procs, outs)]


def per_step(runs: list[Run]) -> dict:
    """Mean seconds per steady step over `runs`: the whole step, each recorded phase, the rest, and the parts of
    the update spent reducing gradients and waiting for the other rank."""
    steps = sum(r.trajectories for r in runs) / (PROMPTS * SAMPLES)
    out = {"step": sum(r.seconds for r in runs) / steps,
           **{phase: sum(r.phases[phase] for r in runs) / steps for phase in PHASES + WITHIN_TRAIN + WITHIN_OTHER}}
    out["other"] = out["step"] - sum(out[phase] for phase in PHASES)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="evo-bench-dp-"))
    path, balanced = work / "recipe.yaml", work / "recipe-balanced.yaml"
    path.write_text(yaml.safe_dump(recipe(args.steps)))
    balanced.write_text(yaml.safe_dump(recipe(args.steps, balance=True)))
    runs: dict[str, list[Run]] = {"1_rank": [], "2_ranks": [], "2_ranks_balanced": [], "one_of_two_at_once": []}
    pair_rates = []  # two one-rank runs at once: their combined trajectories/s, per round
    same_work = True
    try:
        for r in range(args.rounds):
            for nproc, key, recipe_path in ((1, "1_rank", path), (2, "2_ranks", path),
                                            (2, "2_ranks_balanced", balanced)):
                run = train(recipe_path, work / f"run-{r}-{key}", nproc)
                runs[key].append(run)
                print(f"round {r}: {key.replace('_', ' ')}: {run.rate:7.1f} trajectories/s "
                      f"(steady steps {run.seconds:.2f} s, process wall {run.wall:.1f} s)")
            same_work &= runs["1_rank"][-1].rewards == runs["2_ranks"][-1].rewards == runs["2_ranks_balanced"][-1].rewards
            pair = two_at_once(path, (work / f"pair-{r}-a", work / f"pair-{r}-b"))
            runs["one_of_two_at_once"] += pair
            pair_rates.append(sum(run.rate for run in pair))
            print(f"round {r}: two one-rank runs at once: {pair_rates[-1]:7.1f} trajectories/s together")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rate = {key: sum(r.trajectories for r in runs[key]) / sum(r.seconds for r in runs[key])
            for key in ("1_rank", "2_ranks", "2_ranks_balanced")}
    ratio = rate["2_ranks"] / rate["1_rank"]
    ceiling = sum(pair_rates) / len(pair_rates) / rate["1_rank"]
    seconds_per_step = {key: per_step(group) for key, group in runs.items()}
    # The 2-rank step as measured, but with its training phase exactly half of what one of two independent runs
    # trains in (both cores busy): how far a perfect split of the update alone could take the ratio.
    two = seconds_per_step["2_ranks"]
    perfect_split = seconds_per_step["1_rank"]["step"] / (
        two["step"] - two["train"] + seconds_per_step["one_of_two_at_once"]["train"] / 2)
    print(f"1 rank: {rate['1_rank']:.1f} trajectories/s; 2 ranks: {rate['2_ranks']:.1f} trajectories/s; "
          f"ratio {ratio:.2f} (goal >= {GOAL_RATIO}); same trajectories: {same_work}")
    balanced_steps = sum(r.trajectories for r in runs["2_ranks_balanced"]) / (PROMPTS * SAMPLES)
    moved = sum(r.moved for r in runs["2_ranks_balanced"]) / balanced_steps
    gain = sum(r.gain for r in runs["2_ranks_balanced"]) / balanced_steps
    print(f"2 ranks with balancing (grpo.balance_ranks: true): "
          f"{rate['2_ranks_balanced']:.1f} trajectories/s, ratio {rate['2_ranks_balanced'] / rate['1_rank']:.2f}; "
          f"{moved:.1f} of {PROMPTS} groups moved per step, shortening the busier rank's priced update by "
          f"{gain:.1%}")
    print(f"ceiling: two independent one-rank runs at once reach {ceiling:.2f}x one alone; "
          f"the 2-rank run reaches {ratio / ceiling:.0%} of it")
    print(f"with the update split perfectly over the ranks (sampling and the rest as measured): {perfect_split:.2f}x")
    for name, parts in seconds_per_step.items():
        print(f"seconds per steady step, {name.replace('_', ' ')}: "
              + ", ".join(f"{k} {v:.3f}" for k, v in parts.items()))
    print(json.dumps({
        "trajectories_per_s_1_rank": round(rate["1_rank"], 2), "trajectories_per_s_2_ranks": round(rate["2_ranks"], 2),
        "ratio_2_vs_1_rank": round(ratio, 3), "goal_ratio": GOAL_RATIO,
        "ratio_2_balanced_vs_1_rank": round(rate["2_ranks_balanced"] / rate["1_rank"], 3),
        "moved_groups_per_step": round(moved, 2), "priced_balance_gain": round(gain, 4),
        "ceiling_two_independent_runs": round(ceiling, 3), "share_of_ceiling": round(ratio / ceiling, 3),
        "wall_s_1_rank": round(sum(r.wall for r in runs["1_rank"]), 1),
        "wall_s_2_ranks": round(sum(r.wall for r in runs["2_ranks"]), 1),
        "seconds_per_step": {key: {k: round(v, 4) for k, v in parts.items()} for key, parts in seconds_per_step.items()},
        "ratio_if_update_split_perfectly": round(perfect_split, 3),
        "steps": args.steps, "rounds": args.rounds, "trajectories_per_step": PROMPTS * SAMPLES,
        "same_rewards": same_work, "cpus": os.cpu_count(),
        "met": bool(ratio >= GOAL_RATIO and same_work),
    }))


if __name__ == "__main__":
    main()
