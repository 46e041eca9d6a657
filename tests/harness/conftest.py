"""Synthetic run artifacts in the exact formats of docs/contracts.md ("Artifacts of a run").

Tests build small rollouts / eval tables with known answers through the `art`
fixture, so every analyzer can be checked against numbers computed by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROLLOUT_TYPES = {
    "traj_id": pa.string(), "version": pa.string(), "step": pa.int32(), "group": pa.int32(), "sample": pa.int32(),
    "task_id": pa.string(), "stratum": pa.string(), "prompt": pa.string(), "completion": pa.string(),
    "completion_tokens": pa.list_(pa.int32()), "num_tokens": pa.int32(), "finish_reason": pa.string(),
    "truncated": pa.bool_(), "turns": pa.int32(), "tool_calls": pa.int32(), "tools": pa.list_(pa.string()),
    "answer": pa.string(), "tool_result": pa.string(), "turns_cut": pa.int32(), "transcript": pa.string(),
    "reward": pa.float64(),
    "advantage": pa.float64(),
    "kept": pa.bool_(), "filter_reason": pa.string(), "masked": pa.bool_(), "kl": pa.float64(), "entropy": pa.float64(),
    "clip_frac_low": pa.float64(), "clip_frac_high": pa.float64(),
}
EVAL_TYPES = {
    "task_id": pa.string(), "stratum": pa.string(), "sample": pa.int32(), "prompt": pa.string(), "completion": pa.string(),
    "answer": pa.string(), "score": pa.float64(), "num_tokens": pa.int32(), "truncated": pa.bool_(),
    "finish_reason": pa.string(), "turns": pa.int32(), "tool_calls": pa.int32(), "tools": pa.list_(pa.string()),
    "tool_result": pa.string(), "turns_cut": pa.int32(), "transcript": pa.string(),
}


def _table(columns: dict, types: dict) -> pa.Table:
    arrays, names = [], []
    for name, values in columns.items():
        t = types.get(name, pa.float64() if name.startswith("reward/") else None)
        if isinstance(values, np.ndarray):
            values = values.tolist()
        arrays.append(pa.array(values, type=t))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def rollouts(n_steps=3, n_groups=4, G=4, *, rewards=None, **overrides) -> pa.Table:
    """Rollouts of n_steps x n_groups groups of G samples; `rewards` (n,) sets reward and reward/correctness."""
    n = n_steps * n_groups * G
    step = np.repeat(np.arange(n_steps), n_groups * G)
    group = np.tile(np.repeat(np.arange(n_groups), G), n_steps)
    sample = np.tile(np.arange(G), n_steps * n_groups)
    if rewards is None:
        rewards = np.tile([1.0, 0.0], n // 2 + 1)[:n]  # every group has spread
    rewards = np.asarray(rewards, dtype=np.float64)
    tokens = [[int(10 + (i * 7 + j) % 50) for j in range(20)] for i in range(n)]  # 20 distinct-ish tokens each
    cols = {
        "traj_id": [f"s{s}-g{g}-{k}" for s, g, k in zip(step, group, sample)],
        "version": ["v1"] * n,
        "step": step, "group": group, "sample": sample,
        "task_id": [f"t{s * n_groups + g}" for s, g in zip(step, group)],
        "stratum": ["easy" if g % 2 == 0 else "hard" for g in group],
        "prompt": ["2+2="] * n,
        "completion": ["the answer is 4"] * n,
        "completion_tokens": tokens,
        "num_tokens": [len(t) for t in tokens],
        "finish_reason": ["eos"] * n,
        "truncated": [False] * n,
        "turns": [1] * n,
        "tool_calls": [0] * n,
        "tools": [[] for _ in range(n)],
        "answer": [str(i) for i in range(n)],
        "transcript": [""] * n,
        "reward": rewards,
        "reward/correctness": rewards,
        "reward/format": [1.0] * n,
        "advantage": rewards - 0.5,
        "kept": [True] * n,
        "filter_reason": [""] * n,
        "masked": [False] * n,
        "kl": [0.01] * n,
        "entropy": [1.0] * n,
        "clip_frac_low": [0.0] * n,
        "clip_frac_high": [0.01] * n,
    }
    for key, value in overrides.items():
        cols[key.replace("__", "/")] = value
    if "completion_tokens" in overrides and "num_tokens" not in overrides:
        cols["num_tokens"] = [len(t) for t in cols["completion_tokens"]]
    return _table(cols, ROLLOUT_TYPES)


def eval_table(scores: dict, strata: dict | None = None, **overrides) -> pa.Table:
    """One row per task x sample from {task_id: [score per sample]}."""
    task_ids, samples, values, stratum = [], [], [], []
    for task, per_sample in scores.items():
        for i, s in enumerate(per_sample):
            task_ids.append(task)
            samples.append(i)
            values.append(float(s))
            stratum.append((strata or {}).get(task, "all"))
    n = len(values)
    cols = {
        "task_id": task_ids, "stratum": stratum, "sample": samples, "prompt": ["q"] * n,
        "completion": ["a"] * n, "answer": ["a"] * n, "score": values, "reward/correctness": values,
        "reward/format": [1.0] * n, "num_tokens": [10] * n, "truncated": [False] * n,
        "finish_reason": ["eos"] * n, "turns": [1] * n, "tool_calls": [0] * n, "tools": [[] for _ in range(n)],
        "transcript": [""] * n,
    }
    for key, value in overrides.items():
        cols[key.replace("__", "/")] = value
    return _table(cols, EVAL_TYPES)


def write_run(path: Path, *, rollouts_t=None, eval_t=None, metrics=None) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if rollouts_t is not None:
        pq.write_table(rollouts_t, path / "rollouts.parquet")
    if eval_t is not None:
        pq.write_table(eval_t, path / "eval.parquet")
    if metrics is not None:
        (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return path


def ctx_for(tmp_path, name="run", *, rollouts_t=None, eval_t=None, metrics=None, recipe=None, settings=None,
            parent=None, promoted=None, changed_paths=(), declared_harness_revision=False):
    """An AnalyzerContext over a freshly written run folder."""
    from evo.harness.context import AnalyzerContext, RunArtifacts

    run = write_run(tmp_path / name, rollouts_t=rollouts_t, eval_t=eval_t, metrics=metrics)
    return AnalyzerContext(run=RunArtifacts(run), recipe=recipe or {}, settings=settings or {},
                           parent=RunArtifacts(parent) if parent else None,
                           promoted=RunArtifacts(promoted) if promoted else None,
                           changed_paths=tuple(changed_paths), declared_harness_revision=declared_harness_revision)


def run_builtin(name: str, ctx) -> dict:
    """Run one built-in analyzer through the real loader; fail the test on an analyzer error."""
    from evo.harness.loader import AnalyzerFile, run_analyzer
    from evo.resources import resource_dir

    path = resource_dir("analyzers") / f"{name}.py"
    result = run_analyzer(AnalyzerFile(name, path), ctx)
    assert result.status == "ok", result.error
    return {"metrics": result.metrics, "findings": result.findings, "vetoes": result.vetoes, "audit": result.audit}


def ids(result: dict) -> set:
    return {f["id"] for f in result["findings"]}


def by_id(result: dict, finding_id: str) -> dict:
    matches = [f for f in result["findings"] if f["id"] == finding_id]
    assert matches, f"no finding {finding_id}; got {sorted(ids(result))}"
    return matches[0]


@pytest.fixture
def art():
    return SimpleNamespace(rollouts=rollouts, eval_table=eval_table, write_run=write_run, ctx_for=ctx_for,
                           run_builtin=run_builtin, ids=ids, by_id=by_id)
