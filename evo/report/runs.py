"""A version's run artifacts as the report and the trackers read them.

metrics.jsonl rows, the number of steps a run took, and global training steps:
a version trains on from its start's checkpoint (its first parent's; a
repair's is an older ancestor's, or the base model: the `trained` event's
`start`), so its local step s is global step offset(start) + steps(start) + s,
summed down the chain of starts. Readers tolerate what a killed run leaves (a missing file, a torn last
line): a report of a half-finished workspace still renders.
"""

from __future__ import annotations

import json
from pathlib import Path

TRAINING_KEYS = ("reward/mean", "signal/dead_group_ratio", "gen/truncated_frac", "policy/kl",
                 "policy/entropy", "policy/clip_frac_low", "policy/clip_frac_high")
MAX_SERIES_POINTS = 400  # per version and metric in the page; longer runs are strided (the last step is kept)


def read_json(path: Path) -> dict | None:
    """A JSON file's object, or None when it is absent or unreadable (a run killed mid-write)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_metrics(run_dir: Path) -> list[dict]:
    """The rows of `metrics.jsonl`, in file order; a torn last line (a killed run) is skipped."""
    try:
        text = (Path(run_dir) / "metrics.jsonl").read_text(encoding="utf-8")
    except OSError:
        return []
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        rows = json.loads("[" + ",".join(lines) + "]")  # one decode of the whole file: 1,000 runs read in well under 1 s
    except ValueError:
        rows = []
        for line in lines:
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return [r for r in rows if isinstance(r, dict) and isinstance(r.get("step"), int)]


def run_steps(run_dir: Path, metrics: list[dict] | None = None, summary: dict | None = None) -> int:
    """Training steps a run took: summary.json's `steps`, else its logged steps, else 0 (not trained)."""
    summary = (read_json(Path(run_dir) / "summary.json") or {}) if summary is None else summary
    if isinstance(summary.get("steps"), int):
        return summary["steps"]
    rows = read_metrics(run_dir) if metrics is None else metrics
    return max((r["step"] for r in rows), default=-1) + 1


def start_of(record) -> str | None:
    """The version whose policy `record`'s run trained from: the `trained` event's `start` ("base": None),
    else (a harness revision, an older workspace) its first parent."""
    from evo.loop.versions import BASE

    trained = record.last("trained") or {}
    if trained.get("start"):
        return None if trained["start"] == BASE else trained["start"]
    return record.parents[0] if record.parents else None


def global_offsets(records: dict, steps: dict[str, int]) -> dict[str, int]:
    """version -> global step of its local step 0 (the steps of the policies it trained on from, summed).

    Parents always have lower numbers than their children, so one pass in
    version order suffices (no recursion: a chain can be 1,000 versions deep).
    """
    out: dict[str, int] = {}
    for name in sorted(records, key=lambda n: records[n].number):
        p = start_of(records[name])
        out[name] = out[p] + steps.get(p, 0) if p in out else 0
    return out


def version_offset(root, settings: dict, records: dict, version: str) -> int:
    """Global step of `version`'s local step 0, reading only the artifacts of the policies it trained on from."""
    from evo.settings import artifact_dir

    chain, name = [], version
    while name in records and name not in chain:
        chain.append(name)
        name = start_of(records[name])
    return sum(run_steps(artifact_dir(root, settings, a)) for a in chain[1:])


def _round(value):
    return float(f"{value:.5g}") if isinstance(value, float) else value


def training_series(rows: list[dict], offset: int, keys=TRAINING_KEYS, limit: int = MAX_SERIES_POINTS) -> dict:
    """{"step": [global steps], key: [values]}: every logged step, strided past `limit` (last kept)."""
    if not rows:
        return {}
    stride = max(1, -(-len(rows) // limit))
    picked = rows[::stride]
    if picked[-1] is not rows[-1]:
        picked.append(rows[-1])
    out: dict[str, list] = {"step": [offset + r["step"] for r in picked]}
    for key in keys:
        if any(key in r for r in picked):
            out[key] = [_round(r.get(key)) for r in picked]
    return out
