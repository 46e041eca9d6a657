"""Evidence on disk: the Parquet tables and JSON files of a run (docs/contracts.md).

One explicit Arrow schema per table so an empty step or a missing component
still writes the documented column types; readers (the harness) never guess.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

from evo.fileio import jsonable, replaced
from evo.fileio import write_json as _write_json

ROLLOUT_BASE_COLUMNS = (
    ("traj_id", "string"), ("version", "string"), ("step", "int32"), ("group", "int32"), ("sample", "int32"),
    ("task_id", "string"), ("stratum", "string"), ("prompt", "string"), ("completion", "string"),
    ("completion_tokens", "list<int32>"), ("num_tokens", "int32"), ("finish_reason", "string"),
    ("truncated", "bool"), ("turns", "int32"), ("tool_calls", "int32"), ("tools", "list<string>"),
    ("idle_turns", "int32"),  # turns without a valid action, as the domain counts them (null: it does not)
    ("tool_result", "string"),  # the last value a tool handed back for the answer to carry (null: none)
    ("turns_cut", "int32"),  # turns whose action reached rollout.max_new_tokens (the turn's limit, not the episode's)
    ("answer", "string"), ("transcript", "string"), ("reward", "float64"),
)
ROLLOUT_TAIL_COLUMNS = (
    ("advantage", "float64"), ("kept", "bool"), ("filter_reason", "string"), ("masked", "bool"),
    ("kl", "float64"), ("entropy", "float64"), ("clip_frac_low", "float64"), ("clip_frac_high", "float64"),
    ("rank", "int32"),  # the data-parallel rank that sampled the trajectory (0 in one process)
    ("generation_batch", "int32"),  # which prompt batch of its step sampled it (0 unless filters.std_group.refill)
    ("judge_status", "string"),  # reward.model_judge: ok | cached | error: <why>; on_error <policy> ("" without a judge)
)
EVAL_BASE_COLUMNS = (
    ("task_id", "string"), ("stratum", "string"), ("sample", "int32"), ("prompt", "string"),
    ("completion", "string"), ("answer", "string"), ("score", "float64"),
)
EVAL_TAIL_COLUMNS = (
    ("num_tokens", "int32"), ("truncated", "bool"), ("finish_reason", "string"), ("turns", "int32"),
    ("tool_calls", "int32"), ("tools", "list<string>"), ("idle_turns", "int32"), ("tool_result", "string"),
    ("turns_cut", "int32"), ("transcript", "string"),
)


def idle_turns(info: dict) -> int | None:
    """The domain's own count of idle turns (its last step's `idle_turns`, which the rollout driver keeps
    under the trajectory's `extra`), None where it keeps none."""
    value = (info.get("extra") or {}).get("idle_turns")
    return None if value is None else int(value)


def tool_result(info: dict) -> str | None:
    """The last value a tool returned that the episode's answer should carry (the domain's `tool_result`,
    e.g. calc's last calculator value), None where the domain reports none or no call succeeded."""
    value = (info.get("extra") or {}).get("tool_result")
    return None if value is None else str(value)


def _arrow_type(name: str):
    import pyarrow as pa

    return {
        "string": pa.string(), "int32": pa.int32(), "float64": pa.float64(), "bool": pa.bool_(),
        "list<int32>": pa.list_(pa.int32()), "list<string>": pa.list_(pa.string()),
    }[name]


def rollout_schema(components: Sequence[str]):
    import pyarrow as pa

    cols = list(ROLLOUT_BASE_COLUMNS) + [(f"reward/{c}", "float64") for c in components] + list(ROLLOUT_TAIL_COLUMNS)
    return pa.schema([(n, _arrow_type(t)) for n, t in cols])


def eval_schema(components: Sequence[str]):
    import pyarrow as pa

    cols = list(EVAL_BASE_COLUMNS) + [(f"reward/{c}", "float64") for c in components] + list(EVAL_TAIL_COLUMNS)
    return pa.schema([(n, _arrow_type(t)) for n, t in cols])


def write_table(rows: list[dict], schema, path: str | Path) -> Path:
    """Write `rows` (dicts keyed by column) atomically as Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = {f.name: [r.get(f.name) for r in rows] for f in schema}
    table = pa.table(columns, schema=schema)
    with replaced(path) as tmp:
        pq.write_table(table, tmp)
    return path


def concat_parquet(parts: Iterable[Path], schema, path: str | Path) -> Path:
    """Concatenate per-step Parquet shards into one file (shards keep the same schema)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    tables = [pq.read_table(p, schema=schema) for p in parts]
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    with replaced(path) as tmp:
        pq.write_table(table, tmp)
    return path


def write_json(data: dict, path: str | Path) -> Path:
    """JSON artifacts (eval.json, summary.json): NaN/inf as null, numpy scalars as numbers, written atomically."""
    return _write_json(data, path)



def read_json_if(path: str | Path) -> dict | None:
    """The JSON object at `path`, or None when the file is absent or unreadable (half-written)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def append_metrics(metrics: dict, path: str | Path) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(jsonable(metrics)) + "\n")


def read_metrics(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def truncate_metrics(path: str | Path, before_step: int) -> None:
    """Keep only the lines of steps < before_step (a resumed run rewrites the rest)."""
    path = Path(path)
    if not path.exists():
        return
    keep = [json.dumps(m) for m in read_metrics(path) if int(m.get("step", -1)) < before_step]
    path.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
