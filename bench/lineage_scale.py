"""How `evo log` scales: 1,000 versions, timed against a bare `git log`.

Builds a real workspace with `evo init`, then adds N versions in bulk with
`git fast-import` (branches `evo/vN`, a branching lineage, ~30% pruned to
`refs/evo/pruned/vN`, a few promotion tags) and seven lineage events per
version in `refs/notes/evo/lineage`. Then it times

  * `evo log --json` (the real command in a fresh process, startup included), and
  * the peer: `git log --notes=evo/lineage` over the same refs, which prints
    the same commits with their notes but validates and derives nothing,

and counts the git processes `evo log` spawns (GIT_TRACE) on a one-version
workspace and on the large one. Goals: under 1 s, and the same process count.
Ends with one JSON line.

    python bench/lineage_scale.py [--versions 1000] [--repeats 5] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 1.0
EVO = [sys.executable, "-c", "from evo.cli import main; main()"]
IDENT = "EvoTrainer <evo@localhost>"


def git(root: Path, *args: str, input: bytes | None = None, env: dict | None = None) -> bytes:
    return subprocess.run(["git", *args], cwd=root, input=input, capture_output=True, check=True, env=env).stdout


def data_block(text: str) -> bytes:
    raw = text.encode()
    return b"data %d\n" % len(raw) + raw + b"\n"


def build(root: Path, n: int, seed: int = 0) -> dict:
    """Add versions v1..vN to the workspace at `root`; returns counts."""
    rng = random.Random(seed)
    v0 = git(root, "rev-parse", "evo/v0").decode().strip()
    recipe = (root / "recipe.yaml").read_text()
    parents: dict[int, int] = {}
    pruned: set[int] = set()
    promoted: set[int] = set()
    stream = bytearray()
    t0 = 1_700_000_000
    for i in range(1, n + 1):
        # Mostly extend a recent version; sometimes branch from an older one.
        p = i - 1 if rng.random() < 0.7 else rng.randrange(max(0, i - 20), i)
        while p in pruned and p != 0:
            p = parents[p]
        parents[i] = p
        is_pruned = i > 1 and rng.random() < 0.3
        if is_pruned:
            pruned.add(i)
        elif rng.random() < 0.05:
            promoted.add(i)
        ref = f"refs/evo/pruned/v{i}" if is_pruned else f"refs/heads/evo/v{i}"
        message = (f"v{i}: change seed\n\nEvo-Version: v{i}\nEvo-Parent: v{p}\n"
                   f"Evo-Intervention: seed: {p} -> {i}\n")
        stream += f"commit {ref}\nmark :{i}\ncommitter {IDENT} {t0 + i} +0000\n".encode()
        stream += data_block(message)
        stream += (f"from {v0}\n" if p == 0 else f"from :{p}\n").encode()
        stream += b"M 100644 inline recipe.yaml\n" + data_block(recipe.replace("seed: 0", f"seed: {i}", 1))
    for i in sorted(promoted):
        stream += f"tag evo/promoted/v{i}\nfrom :{i}\ntagger {IDENT} {t0 + n + i} +0000\n".encode()
        stream += data_block(f"Promote v{i}")
    marks = root / ".evo" / "bench-marks"
    marks.parent.mkdir(exist_ok=True)
    git(root, "fast-import", "--quiet", f"--export-marks={marks}", input=bytes(stream))
    shas = {int(m[1:]): sha for m, sha in (line.split() for line in marks.read_text().splitlines())}

    notes = bytearray()
    notes += f"commit refs/notes/evo/lineage\ncommitter {IDENT} {t0 + 3 * n} +0000\n".encode()
    notes += data_block("bench lineage") + b"from refs/notes/evo/lineage^0\n"
    events_total = 0
    for i in range(1, n + 1):
        events = version_events(i, parents[i], shas[i], rng, pruned, promoted)
        events_total += len(events)
        notes += f"N inline {shas[i]}\n".encode() + data_block("".join(json.dumps(e) + "\n" for e in events))
    git(root, "fast-import", "--quiet", input=bytes(notes))
    return {"versions": n + 1, "pruned": len(pruned), "promoted": len(promoted) + 1, "events": events_total + 2}


def version_events(i: int, p: int, sha: str, rng: random.Random, pruned: set, promoted: set) -> list[dict]:
    v = f"v{i}"
    stamp = f"2025-01-01T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}"
    value = round(rng.uniform(0.1, 0.9), 4)
    delta = round(rng.uniform(-0.1, 0.1), 4)
    outcome = "regression" if i in pruned else rng.choice(["improvement", "mixed", "insufficient"])

    def ev(kind: str, order: int, **fields) -> dict:
        return {"event": kind, "version": v, "time": f"{stamp}.{order:06d}Z", "id": f"{v}-{kind}", **fields}

    final = ("pruned" if i in pruned else "promoted" if i in promoted else "kept")
    return [
        ev("created", 1, parents=[f"v{p}"], branch=f"evo/{v}", commit=sha, agent="heuristic",
           intervention={"kind": "policy", "factor": "seed", "change": f"seed: {p} -> {i}"}),
        ev("diagnosed", 2, harness_version="0123456789ab", findings={"warning": 2, "info": 5}, vetoed=False),
        ev("gated", 3, estimate={"tokens": 120000, "gpu_hours": 0.01}, threshold=1.0, status="approved"),
        ev("trained", 4, artifacts=[{"name": "checkpoint", "uri": f".evo/artifacts/{v}/checkpoint", "size": 123456,
                                     "sha256": "ab" * 32}], metrics={"reward/mean": value}),
        ev("evaluated", 5, avg_at_k=value, k=8, n_tasks=200, per_stratum={"easy": value, "hard": value / 2}),
        ev("judged", 6, baseline=f"v{p}", outcome=outcome,
           headline={"metric": "score/avg_at_k", "value": value, "delta": delta, "ci_low": delta - 0.03,
                     "ci_high": delta + 0.03, "p_value": 0.04}, vetoes=[]),
        ev(final, 7, reason="bench"),
    ]


def time_cmd(cmd: list[str], cwd: Path, repeats: int) -> tuple[float, bytes]:
    times, out = [], b""
    for _ in range(repeats):
        start = time.perf_counter()
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, check=True).stdout
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def count_git_processes(root: Path, tmp: Path) -> tuple[int, int]:
    """(git processes spawned by `evo log --json`, records it printed)."""
    trace = tmp / f"trace-{time.monotonic_ns()}"
    env = {**os.environ, "GIT_TRACE": str(trace)}
    out = subprocess.run(EVO + ["log", "--json", "-C", str(root)], capture_output=True, check=True, env=env).stdout
    count = sum(1 for line in trace.read_text().splitlines() if "trace: built-in: git" in line) if trace.exists() else 0
    return count, len(json.loads(out)["versions"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None, help="where to build (default: a temporary folder, removed)")
    args = ap.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="evo-lineage-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        from evo.workspace import init_workspace

        small = init_workspace(base / "small")
        large = init_workspace(base / "large")
        t = time.perf_counter()
        counts = build(large, args.versions)
        build_s = time.perf_counter() - t
        print(f"built {counts['versions']} versions ({counts['pruned']} pruned, {counts['promoted']} promoted, "
              f"{counts['events']} events) in {build_s:.2f} s", file=sys.stderr)

        procs_small, _ = count_git_processes(small, base)
        procs_large, records = count_git_processes(large, base)
        evo_s, _ = time_cmd(EVO + ["log", "--json", "-C", str(large)], large, args.repeats)
        git_s, _ = time_cmd(["git", "log", "--notes=evo/lineage", "--format=%H %P%n%s%n%N",
                             "--branches=evo/*", "--glob=refs/evo/pruned/*", "--tags=evo/promoted/*"],
                            large, args.repeats)
        ratio = evo_s / git_s if git_s else float("inf")
        print(f"evo log --json: {evo_s:.3f} s   git log --notes: {git_s:.3f} s   ratio {ratio:.1f}x   "
              f"git processes: {procs_small} (1 version) vs {procs_large} ({records} versions)", file=sys.stderr)
        result = {
            "versions_built": args.versions,
            "versions_total": counts["versions"],
            "records_read": records,
            "events": counts["events"],
            "evo_log_s": round(evo_s, 4),
            "git_log_s": round(git_s, 4),
            "ratio_vs_git_log": round(ratio, 2),
            "git_processes_small": procs_small,
            "git_processes_large": procs_large,
            "goal_evo_log_s": GOAL_S,
            "goal_constant_git_processes": True,
            "met": evo_s < GOAL_S and procs_small == procs_large,
        }
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
