"""Programs evaluated per second: the sandbox vs bare `subprocess.run`.

The workload is the shipped code tasks' reference programs on their stdin tests
(what a code-domain rollout runs), repeated for a few rounds. Each round runs
the whole workload once through `Sandbox.run_script` (fresh folder, a
bubblewrap jail where the machine has one, limits, audit hook, output caps,
cleanup) and once through the peer a naive harness would write:
`subprocess.run([python, prog.py], input=..., timeout=...)` on a file written
once per program. Rounds alternate so machine load drifts equally on both; the
figure is total programs / total seconds per side, and outputs are checked
equal so both did the same work.

Also printed, with no goal: the assert-test tasks through `Sandbox.run_asserts`
(two jailed processes: the program and the judge) against one bare process that
execs the program and then the asserts (what a naive harness does, and what a
program can forge from inside).

    .venv/bin/python bench/sandbox_throughput.py [--rounds 5]

Ends with one JSON line: figures, the goal (ratio >= 0.5) and "met".
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evo.domains.code import CodeEnv, outputs_match
from evo.domains.sandbox import Sandbox, SandboxLimits, isolation

GOAL_RATIO = 0.5


def workload() -> tuple[list[tuple[str, str, str, str]], list[tuple[str, str, list[str]]]]:
    """(task id, program, stdin, expected stdout) for every stdin test of the sample tasks,
    and (task id, program, assert snippets) for every task with assert tests."""
    env = CodeEnv()
    jobs, assert_jobs = [], []
    for split in ("train", "validation"):
        for task in env.tasks(split):
            snippets = [t for t in task.meta["tests"] if isinstance(t, str)]
            if snippets:
                assert_jobs.append((task.id, task.answer, snippets))
            for test in task.meta["tests"]:
                if isinstance(test, dict):
                    jobs.append((task.id, task.answer, test["input"], test["output"]))
    return jobs, assert_jobs


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


def run_sandbox_asserts(sandbox: Sandbox, jobs) -> tuple[float, int]:
    start, ok = time.perf_counter(), 0
    for _tid, program, snippets in jobs:
        result = sandbox.run_asserts(program, snippets)
        ok += sum(bool(r.get("passed")) for r in result.results) == len(snippets)
    return time.perf_counter() - start, ok


BARE_ASSERTS = "import sys\nns = {}\nexec(open(sys.argv[1]).read(), ns)\nfor t in eval(sys.stdin.read()):\n    exec(t, ns)\n"


def run_bare_asserts(files: dict[str, Path], jobs) -> tuple[float, int]:
    start, ok = time.perf_counter(), 0
    for tid, _program, snippets in jobs:
        proc = subprocess.run([sys.executable, "-c", BARE_ASSERTS, str(files[tid])], input=repr(snippets),
                              capture_output=True, text=True, timeout=10)
        ok += proc.returncode == 0
    return time.perf_counter() - start, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    jobs, assert_jobs = workload()
    sandbox = Sandbox(SandboxLimits(cpu_seconds=2, wall_seconds=10))
    folder = Path(tempfile.mkdtemp(prefix="evo-bench-bare-"))
    files = {}
    for tid, program, *_rest in jobs + assert_jobs:
        files[tid] = folder / f"{tid}.py"
        files[tid].write_text(program)
    run_sandbox(sandbox, jobs[:3])  # warm-up: probes the jail once, compiles the bootstrap .pyc
    run_bare(files, jobs[:3])

    totals = dict.fromkeys(("sandbox_s", "bare_s", "asserts_s", "bare_asserts_s"), 0.0)
    correct = dict.fromkeys(("sandbox", "bare", "asserts", "bare_asserts"), 0)
    for _ in range(args.rounds):
        for name, fn, arg, work in (("sandbox", run_sandbox, sandbox, jobs), ("bare", run_bare, files, jobs),
                                    ("asserts", run_sandbox_asserts, sandbox, assert_jobs),
                                    ("bare_asserts", run_bare_asserts, files, assert_jobs)):
            seconds, ok = fn(arg, work)
            totals[name + "_s"] += seconds
            correct[name] += ok
    shutil.rmtree(folder)

    n, m = len(jobs) * args.rounds, len(assert_jobs) * args.rounds
    sandbox_rate, bare_rate = n / totals["sandbox_s"], n / totals["bare_s"]
    asserts_rate, bare_asserts_rate = m / totals["asserts_s"], m / totals["bare_asserts_s"]
    ratio = sandbox_rate / bare_rate
    iso = isolation()
    layers = [f"bubblewrap jail, uid {iso['runs_as_uid']}" if iso["jail"] else "NO jail", "audit-hook", "rlimits"]
    print(f"workload: {len(jobs)} program runs x {args.rounds} rounds ({len({j[0] for j in jobs})} programs)")
    print(f"sandbox ({', '.join(layers)}): {sandbox_rate:7.1f} programs/s, {correct['sandbox']}/{n} correct")
    print(f"bare subprocess.run:        {bare_rate:7.1f} programs/s, {correct['bare']}/{n} correct")
    print(f"ratio sandbox / bare: {ratio:.2f} (goal >= {GOAL_RATIO})")
    print(f"assert tasks: sandbox (program + judge) {asserts_rate:6.1f} tasks/s, {correct['asserts']}/{m} pass; "
          f"one bare process {bare_asserts_rate:6.1f} tasks/s, {correct['bare_asserts']}/{m} pass "
          f"(ratio {asserts_rate / bare_asserts_rate:.2f}, no goal)")
    print(json.dumps({
        "sandbox_programs_per_s": round(sandbox_rate, 2), "bare_subprocess_programs_per_s": round(bare_rate, 2),
        "ratio_vs_bare_subprocess": round(ratio, 3), "goal_ratio": GOAL_RATIO,
        "correct_sandbox": correct["sandbox"], "correct_bare": correct["bare"], "runs": n,
        "assert_tasks_per_s": round(asserts_rate, 2), "bare_assert_tasks_per_s": round(bare_asserts_rate, 2),
        "assert_ratio": round(asserts_rate / bare_asserts_rate, 3),
        "jail": iso["jail"], "runs_as_uid": iso["runs_as_uid"],
        "met": bool(ratio >= GOAL_RATIO and correct["sandbox"] == correct["bare"] == n
                    and correct["asserts"] == correct["bare_asserts"] == m),
    }))


if __name__ == "__main__":
    main()
