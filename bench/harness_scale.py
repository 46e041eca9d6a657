"""Benchmark: the whole built-in harness over a million trajectories, and the paired bootstrap.

Builds a synthetic run in the exact artifact format (docs/contracts.md): 1,000,000
rollout rows (500 steps x 250 groups x 8 samples, multi-turn SWE-like, token
lists of 4-256 tokens with 2% repetitive rows), a 78-task x 8-sample validation
set for the run and its parent, and metrics.jsonl. Then measures

- `diagnose` with every built-in analyzer and audit (including the parent
  comparison), against the named peer: one `pyarrow.parquet.read_table` scan of
  the same rollouts file. Goal: within 10x of the scan.
- the stratified paired bootstrap over 78 tasks x 8 samples with B = 10,000,
  against a Python loop over resamples with the same draws. Goal: under 0.2 s.

Ends with one JSON line: figures, goals and "met".
Run: .venv/bin/python bench/harness_scale.py [--rows N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

GOAL_RATIO_VS_SCAN = 10.0
GOAL_BOOTSTRAP_S = 0.2
GROUP_SIZE = 8
GROUPS_PER_STEP = 250
TOOLS = ["bash", "read", "edit", "run_tests", "search", "submit"]


def _strings(prefix_parts: list) -> pa.Array:
    return pc.binary_join_element_wise(*prefix_parts, "")


def synthetic_rollouts(rows: int, rng: np.random.Generator) -> pa.Table:
    n_steps = max(1, rows // (GROUPS_PER_STEP * GROUP_SIZE))
    rows = n_steps * GROUPS_PER_STEP * GROUP_SIZE
    step = np.repeat(np.arange(n_steps, dtype=np.int32), GROUPS_PER_STEP * GROUP_SIZE)
    group = np.tile(np.repeat(np.arange(GROUPS_PER_STEP, dtype=np.int32), GROUP_SIZE), n_steps)
    sample = np.tile(np.arange(GROUP_SIZE, dtype=np.int32), n_steps * GROUPS_PER_STEP)
    as_str = lambda a: pc.cast(pa.array(a), pa.string())  # noqa: E731
    traj_id = _strings(["s", as_str(step), "-g", as_str(group), "-", as_str(sample)])
    task_id = _strings(["t", as_str(step.astype(np.int64) * GROUPS_PER_STEP + group)])
    stratum = pa.array(["easy", "medium", "hard"]).take(pa.array(group % 3))

    # Token lists: gamma-distributed lengths, 2% of rows a 5-token loop (repetitive).
    lengths = np.clip(rng.gamma(2.0, 14.0, rows).astype(np.int64) + 4, 4, 256)  # (rows,)
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    values = rng.integers(0, 5000, int(lengths.sum()), dtype=np.int32)  # (tokens,)
    repetitive = rng.random(rows) < 0.02
    row_of_token = np.repeat(np.arange(rows), lengths)
    pos = np.arange(len(values)) - np.repeat(offsets[:-1], lengths)
    loop = repetitive[row_of_token]
    values[loop] = (pos[loop] % 5).astype(np.int32)
    tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    truncated = lengths >= 256

    turns = rng.integers(1, 21, rows).astype(np.int32)
    tool_calls = np.minimum(turns, rng.integers(0, 21, rows)).astype(np.int32)
    tool_offsets = np.concatenate(([0], np.cumsum(tool_calls))).astype(np.int32)
    tools = pa.ListArray.from_arrays(pa.array(tool_offsets), pa.array(TOOLS).take(pa.array(rng.integers(0, len(TOOLS), int(tool_calls.sum())))))
    finish = np.where(truncated, "length", np.where(turns >= 20, "max_turns", "eos"))

    pass_rate = rng.beta(0.5, 0.5, rows // GROUP_SIZE)  # (groups,): many all-pass / all-fail groups
    correctness = (rng.random(rows) < np.repeat(pass_rate, GROUP_SIZE)).astype(np.float64)
    g_mean = correctness.reshape(-1, GROUP_SIZE).mean(axis=1)
    g_std = correctness.reshape(-1, GROUP_SIZE).std(axis=1)
    advantage = (correctness - np.repeat(g_mean, GROUP_SIZE)) / (np.repeat(g_std, GROUP_SIZE) + 1e-6)

    completions = pa.array([f"<think>step {i} reasoning" + ("</think> patch applied" if i % 7 else "") for i in range(1000)])
    answers = pa.array([f"patch-{i:04d}" if i % 10 else "" for i in range(1000)])
    transcript_pool = pa.array([""] * 99 + [json.dumps([{"role": "user", "content": "fix the bug"},
                                                       {"role": "assistant", "content": "run_tests"},
                                                       {"role": "tool", "content": "2 failed"},
                                                       {"role": "assistant", "content": "patch-0001"}])])
    pick = lambda pool: pool.take(pa.array(rng.integers(0, len(pool), rows)))  # noqa: E731
    return pa.table({
        "traj_id": traj_id, "version": pa.array([""] * rows), "step": step, "group": group, "sample": sample,
        "task_id": task_id, "stratum": stratum, "prompt": pa.array(["Fix the failing test in repo"] * rows),
        "completion": pick(completions), "completion_tokens": tokens, "num_tokens": lengths.astype(np.int32),
        "finish_reason": pa.array(finish), "truncated": truncated, "turns": turns, "tool_calls": tool_calls,
        "tools": tools, "answer": pick(answers), "transcript": pick(transcript_pool),
        "reward": correctness, "reward/correctness": correctness,
        "reward/format": (rng.random(rows) > 0.05).astype(np.float64), "reward/judge_if": rng.random(rows),
        "advantage": advantage, "kept": np.ones(rows, bool), "filter_reason": pa.array([""] * rows),
        "masked": np.zeros(rows, bool), "kl": rng.random(rows) * 0.01, "entropy": rng.random(rows) + 0.5,
        "clip_frac_low": rng.random(rows) * 0.01, "clip_frac_high": rng.random(rows) * 0.02,
    })


def synthetic_eval(rng: np.random.Generator, shift: float) -> pa.Table:
    strata = ["aime24"] * 30 + ["aime25"] * 30 + ["cnmo24"] * 18  # 78 tasks, as in the paper's Math set
    p = np.clip(rng.beta(1, 1, 78) + shift, 0, 1)
    n = 78 * 8
    task = np.repeat(np.arange(78), 8)
    score = (rng.random(n) < p[task]).astype(np.float64)
    return pa.table({
        "task_id": [f"m{t}" for t in task], "stratum": [strata[t] for t in task], "sample": np.tile(np.arange(8), 78).astype(np.int32),
        "prompt": ["q"] * n, "completion": ["a"] * n, "answer": ["a"] * n, "score": score, "reward/correctness": score,
        "num_tokens": rng.integers(10, 300, n).astype(np.int32), "truncated": rng.random(n) < 0.05,
        "finish_reason": ["eos"] * n, "turns": rng.integers(1, 20, n).astype(np.int32), "tool_calls": np.zeros(n, np.int32),
        "tools": pa.array([[] for _ in range(n)], type=pa.list_(pa.string())), "transcript": [""] * n,
    })


def best_of(n: int, fn) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def loop_bootstrap(d: np.ndarray, strata: np.ndarray, B: int, seed: int) -> tuple[float, float]:
    """The peer: one resample per Python iteration (same draws as the vectorised version)."""
    labels, inverse = np.unique(strata, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    sizes = np.bincount(inverse)
    col_size, col_offset = np.repeat(sizes, sizes), np.repeat(np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
    d_sorted = d[order]
    rng = np.random.default_rng(seed)
    means = np.empty(B)
    for b in range(B):
        means[b] = d_sorted[col_offset + (rng.random(len(d)) * col_size).astype(np.int64)].mean()
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()

    from evo.harness import stats
    from evo.harness.diagnose import diagnose

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="evo-bench-") as tmp:
        run, parent = Path(tmp) / "run", Path(tmp) / "parent"
        run.mkdir()
        parent.mkdir()
        t0 = time.perf_counter()
        table = synthetic_rollouts(args.rows, rng)
        pq.write_table(table, run / "rollouts.parquet")
        rows = table.num_rows
        del table
        pq.write_table(synthetic_eval(rng, 0.05), run / "eval.parquet")
        pq.write_table(synthetic_eval(rng, 0.0), parent / "eval.parquet")
        steps = rows // (GROUPS_PER_STEP * GROUP_SIZE)
        (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "policy/entropy": 1.0 - 0.5 * s / steps, "policy/kl": 0.01,
                                                                   "policy/clip_frac_high": 0.01}) + "\n" for s in range(steps)))
        size_mb = (run / "rollouts.parquet").stat().st_size / 1e6
        print(f"synthetic run: {rows:,} rollout rows ({size_mb:.0f} MB parquet), built in {time.perf_counter() - t0:.1f}s")

        scan_s = best_of(3, lambda: pq.read_table(run / "rollouts.parquet", memory_map=True))
        recipe = {"domain": {"name": "swe", "options": {"max_turns": 20}}, "rollout": {"max_new_tokens": 256},
                  "reward": {"terms": [{"name": "correctness", "weight": 1.0, "mode": "add"}]}}
        diagnose(run, recipe=recipe, parent_run_dir=parent, out_dir=Path(tmp) / "warm")  # imports, caches
        holder = {}

        def full():
            holder["diag"] = diagnose(run, recipe=recipe, parent_run_dir=parent, out_dir=Path(tmp) / "out")

        analyzers_s = best_of(2, full)
        diag = holder["diag"]
        failed = [a["name"] for a in diag["analyzers"] if a["status"] != "ok"]
        print(f"pyarrow.parquet.read_table (peer): {scan_s:.3f}s")
        print(f"diagnose, {len(diag['analyzers'])} built-in analyzers: {analyzers_s:.3f}s "
              f"= {analyzers_s / scan_s:.2f}x one scan, {rows / analyzers_s:,.0f} rows/s")
        for a in sorted(diag["analyzers"], key=lambda a: -a["seconds"])[:8]:
            print(f"  {a['name']:<20} {a['seconds']:.3f}s")
        if failed:
            print(f"analyzer errors: {failed}")

        child_scores = stats.task_scores(pq.read_table(run / "eval.parquet"))
        parent_scores = stats.task_scores(pq.read_table(parent / "eval.parquet"))
        paired = stats.pair(child_scores, parent_scores)
        stats.paired_bootstrap(paired.child, paired.parent, paired.strata, B=100)  # warm
        boot_s = best_of(5, lambda: stats.paired_bootstrap(paired.child, paired.parent, paired.strata, B=10_000, seed=0))
        start = time.perf_counter()
        loop_ci = loop_bootstrap(paired.child - paired.parent, paired.strata, 10_000, 0)
        loop_s = time.perf_counter() - start
        fast = stats.paired_bootstrap(paired.child, paired.parent, paired.strata, B=10_000, seed=0)
        same = np.allclose((fast["ci_low"], fast["ci_high"]), loop_ci)
        print(f"paired bootstrap, {paired.task_ids.size} tasks x {paired.k} samples, B=10,000: {boot_s * 1000:.1f} ms "
              f"(python loop peer {loop_s * 1000:.0f} ms, {loop_s / boot_s:.0f}x; identical interval: {same})")

    ratio = analyzers_s / scan_s
    met = ratio <= GOAL_RATIO_VS_SCAN and boot_s < GOAL_BOOTSTRAP_S and not failed and same
    print(json.dumps({
        "rows": rows, "scan_s": round(scan_s, 4), "analyzers_s": round(analyzers_s, 4),
        "analyzers_vs_scan": round(ratio, 3), "rows_per_s": round(rows / analyzers_s),
        "bootstrap_s": round(boot_s, 5), "loop_bootstrap_s": round(loop_s, 4), "bootstrap_speedup_vs_loop": round(loop_s / boot_s, 1),
        "analyzer_errors": len(failed), "goal_analyzers_vs_scan": GOAL_RATIO_VS_SCAN, "goal_bootstrap_s": GOAL_BOOTSTRAP_S,
        "met": bool(met),
    }))


if __name__ == "__main__":
    main()
