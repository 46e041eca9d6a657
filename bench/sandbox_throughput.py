"""Programs evaluated per second: the sandbox vs bare `subprocess.run`.

The workload is the shipped code tasks' reference programs on their stdin tests
(what a code-domain rollout runs), repeated for a few rounds. Each round runs
the whole workload once through `Sandbox.run_script` (fresh folder, namespaces,
limits, audit hook, output caps, cleanup) and once through the peer a naive
harness would write: `subprocess.run([python, prog.py], input=..., timeout=...)`
on a file written once per program. Rounds alternate so machine load drifts
equally on both; the figure is total programs / total seconds per side, and
outputs are checked equal so both did the same work.

    .venv/bin/python bench/sandbox_throughput.py [--rounds 5]

Ends with one JSON line: figures, the goal (ratio >= 0.5) and "met".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evo.domains.code import CodeEnv, outputs_match
from evo.domains.sandbox import Sandbox, SandboxLimits, isolation

GOAL_RATIO = 0.5


def workload() -> list[tuple[str, str, str, str]]:
    """(task id, program, stdin, expected stdout) for every stdin test of the sample tasks."""
    env = CodeEnv()
    jobs = []
    for split in ("train", "validation"):
        for task in env.tasks(split):
            for test in task.meta["tests"]:
                if isinstance(test, dict):
                    jobs.append((task.id, task.answer, test["input"], test["output"]))
    return jobs


def run_sandbox(sandbox: Sandbox, jobs) -> tuple[float, int]:
    start, ok = time.perf_counter(), 0
    for _tid, program, stdin, expected in jobs:
        result = sandbox.run_script(program, stdin=stdin)
        ok += result.ok and outputs_match(result.stdout, expected)
    return time.perf_counter() - start, ok


def run_bare(files: dict[str, Path], jobs) -> tuple[float, int]:
    start, ok = time.perf_counter(), 0
    for tid, _program, stdin, expected in jobs:
        proc = subprocess.run([sys.executable, str(files[tid])], input=stdin, capture_output=True, text=True, timeout=10)
        ok += proc.returncode == 0 and outputs_match(proc.stdout, expected)
    return time.perf_counter() - start, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    jobs = workload()
    sandbox = Sandbox(SandboxLimits(cpu_seconds=2, wall_seconds=10))
    folder = Path(tempfile.mkdtemp(prefix="evo-bench-bare-"))
    files = {}
    for tid, program, _stdin, _expected in jobs:
        files[tid] = folder / f"{tid}.py"
        files[tid].write_text(program)
    run_sandbox(sandbox, jobs[:3])  # warm-up: probes isolation once, caches the bootstrap .pyc
    run_bare(files, jobs[:3])

    sandbox_s = bare_s = 0.0
    sandbox_ok = bare_ok = 0
    for _ in range(args.rounds):
        s, ok = run_sandbox(sandbox, jobs)
        sandbox_s, sandbox_ok = sandbox_s + s, sandbox_ok + ok
        b, ok = run_bare(files, jobs)
        bare_s, bare_ok = bare_s + b, bare_ok + ok
    for f in files.values():
        f.unlink()
    folder.rmdir()

    n = len(jobs) * args.rounds
    sandbox_rate, bare_rate = n / sandbox_s, n / bare_s
    ratio = sandbox_rate / bare_rate
    iso = isolation()
    layers = ["namespaces" if iso["namespaces"] else "no-namespaces",
              "pids-cgroup" if sandbox.use_cgroup else "no-cgroup", "audit-hook", "rlimits"]
    print(f"workload: {len(jobs)} program runs x {args.rounds} rounds ({len(files)} programs)")
    print(f"sandbox ({', '.join(layers)}): {sandbox_rate:7.1f} programs/s, {sandbox_ok}/{n} correct")
    print(f"bare subprocess.run:        {bare_rate:7.1f} programs/s, {bare_ok}/{n} correct")
    print(f"ratio sandbox / bare: {ratio:.2f} (goal >= {GOAL_RATIO})")
    print(json.dumps({
        "sandbox_programs_per_s": round(sandbox_rate, 2), "bare_subprocess_programs_per_s": round(bare_rate, 2),
        "ratio_vs_bare_subprocess": round(ratio, 3), "goal_ratio": GOAL_RATIO,
        "correct_sandbox": sandbox_ok, "correct_bare": bare_ok, "runs": n,
        "namespaces": iso["namespaces"], "pids_cgroup": sandbox.use_cgroup,
        "met": bool(ratio >= GOAL_RATIO and sandbox_ok == bare_ok == n),
    }))


if __name__ == "__main__":
    main()
