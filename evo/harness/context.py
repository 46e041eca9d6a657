"""What an analyzer sees: one run's artifacts, its recipe, its relatives, lineage.

`RunArtifacts` wraps a run folder (docs/contracts.md, "Artifacts of a run") and
loads each file on first use, so a diagnosis that never touches `eval.parquet`
never reads it, and every analyzer in one diagnosis shares a single read of
`rollouts.parquet` (the dominant cost at a million rows).

`AnalyzerContext` is the `ctx` handed to `analyze(ctx)`. `ctx.cache` lets the
analyzer kit (`evo.harness.kit`) compute group indexes and n-gram statistics
once per diagnosis instead of once per analyzer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evo.errors import HarnessError
from evo.recipe import get_path

ROLLOUTS_FILE = "rollouts.parquet"
EVAL_FILE = "eval.parquet"
METRICS_FILE = "metrics.jsonl"
EVAL_SUMMARY_FILE = "eval.json"
SUMMARY_FILE = "summary.json"
DIAGNOSIS_FILE = "diagnosis.json"

_MISSING = object()


class RunArtifacts:
    """Lazily loaded artifacts of one run folder; absent files read as None (or [] for metrics)."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        if not self.run_dir.is_dir():
            raise HarnessError(f"{self.run_dir}: run folder not found; train or evaluate the version first")
        self._loaded: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"RunArtifacts({str(self.run_dir)!r})"

    def _once(self, key: str, load):
        value = self._loaded.get(key, _MISSING)
        if value is _MISSING:
            value = load()
            self._loaded[key] = value
        return value

    def _read_parquet(self, name: str):
        path = self.run_dir / name
        if not path.exists():
            return None
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path, memory_map=True)
        except Exception as exc:  # pyarrow raises several unrelated types for corrupt files
            raise HarnessError(f"{path}: cannot read Parquet ({type(exc).__name__}: {exc}); re-run the step that writes it") from None

    def _read_json(self, name: str):
        path = self.run_dir / name
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise HarnessError(f"{path}: malformed JSON at line {exc.lineno}; re-run the step that writes it") from None

    @property
    def rollouts(self):
        """`rollouts.parquet` as a pyarrow Table, or None when the run has no training rollouts."""
        return self._once("rollouts", lambda: self._read_parquet(ROLLOUTS_FILE))

    @property
    def eval(self):
        """`eval.parquet` (one row per task x sample), or None when the run was not evaluated."""
        return self._once("eval", lambda: self._read_parquet(EVAL_FILE))

    @property
    def metrics(self) -> list[dict]:
        """`metrics.jsonl` as a list of per-step dicts ([] when absent)."""
        return self._once("metrics", self._read_metrics)

    @property
    def eval_summary(self) -> dict | None:
        return self._once("eval_summary", lambda: self._read_json(EVAL_SUMMARY_FILE))

    @property
    def summary(self) -> dict | None:
        return self._once("summary", lambda: self._read_json(SUMMARY_FILE))

    @property
    def diagnosis(self) -> dict | None:
        """A `diagnosis.json` written earlier for this run, if any."""
        return self._once("diagnosis", lambda: self._read_json(DIAGNOSIS_FILE))

    def _read_metrics(self) -> list[dict]:
        path = self.run_dir / METRICS_FILE
        if not path.exists():
            return []
        rows = []
        lines = path.read_text(encoding="utf-8").splitlines()
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                # A run killed mid-write leaves a partial last line; earlier lines are still evidence.
                if lineno == len(lines):
                    break
                raise HarnessError(f"{path}: line {lineno} is not JSON; fix or remove that line") from None
        return rows


@dataclass
class AnalyzerContext:
    """The `ctx` passed to every analyzer's `analyze(ctx)`."""

    run: RunArtifacts
    recipe: dict = field(default_factory=dict)
    parent: RunArtifacts | None = None
    promoted: RunArtifacts | None = None
    lineage: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    changed_paths: tuple = ()
    declared_harness_revision: bool = False
    version: str = ""
    cache: dict = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        return self.run.run_dir

    @property
    def rollouts(self):
        return self.run.rollouts

    @property
    def eval(self):
        return self.run.eval

    @property
    def metrics(self) -> list[dict]:
        return self.run.metrics

    @property
    def domain(self) -> str:
        return ((self.recipe or {}).get("domain") or {}).get("name", "") or (self.settings or {}).get("domain", "")

    def setting(self, dotted_path: str, default: Any = None) -> Any:
        """Read `audits.leakage_signatures`-style paths from settings, with a default."""
        return get_path(self.settings or {}, dotted_path, default)
