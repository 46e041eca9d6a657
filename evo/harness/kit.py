"""Helpers for analyzer authors: columns as numpy, group reductions, findings.

Analyzers (built-in or a workspace's own) import this module:

    from evo.harness import kit
    g = kit.groups(ctx)                      # (step, group) index over ctx.rollouts, cached
    spread = g.std(kit.col(ctx.rollouts, "reward"))   # (groups,)
    return {"metrics": {...}, "findings": [kit.finding("signal.x", "warning", "...", rows=[...])]}

Everything here is vectorised over columns (numpy / pyarrow.compute); results
shared by several analyzers (the group index, n-gram statistics) are cached in
`ctx.cache` for the duration of one diagnosis. Text searches for rare strings
(`regex_mask_prefiltered`, `text_may_contain`) first scan each chunk's whole
text buffer for a literal, so chunks that cannot match cost no per-row work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from evo.harness.ngrams import NgramStats, ngram_stats
from evo.train.types import EPISODE_BUDGET  # noqa: F401  (analyzers read finish reasons through kit)

IDLE_SHARE = 0.5  # an episode idles when at least this share of its turns held no valid action

LAYERS = ("score", "signal", "behavior", "version")
SEVERITIES = ("info", "warning", "critical")
MAX_EVIDENCE_ROWS = 50  # rows cited per finding; the finding's values carry the full counts


def finding(id: str, severity: str, message: str, *, rows: Iterable = (), values: dict | None = None, layer: str | None = None) -> dict:
    """Build a finding dict in the diagnosis format (layer defaults to the id's prefix)."""
    layer = layer or id.split(".", 1)[0]
    return {
        "id": id,
        "layer": layer,
        "severity": severity,
        "message": message,
        "evidence": {"rows": [str(r) for r in list(rows)[:MAX_EVIDENCE_ROWS]], "values": dict(values or {})},
    }


def has(table, name: str) -> bool:
    return table is not None and name in table.column_names


def col(table, name: str, dtype=None) -> np.ndarray:
    """Column `name` as a numpy array (nulls become 0 / False / "")."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column(name)
    if column.null_count:
        t = column.type
        fill = "" if pa.types.is_string(t) or pa.types.is_large_string(t) else (False if pa.types.is_boolean(t) else 0)
        column = pc.fill_null(column, fill)
    arr = column.to_numpy()
    return arr.astype(dtype) if dtype is not None else arr


def components(table) -> list[str]:
    """Reward component names stored as `reward/<component>` columns."""
    if table is None:
        return []
    return [c.split("/", 1)[1] for c in table.column_names if c.startswith("reward/")]


def rows_where(ids, mask: np.ndarray, limit: int = MAX_EVIDENCE_ROWS) -> list[str]:
    """The first `limit` distinct ids where `mask` holds (evidence rows for a finding).

    `ids` is a numpy array or, cheaper for big tables, a pyarrow column such as
    `table.column("traj_id")`: only the cited rows are converted to Python.
    Validation rows repeat a task id once per sample; each is cited once.
    """
    picked = np.flatnonzero(mask)[: limit * 8]  # room for repeated task ids
    values = ids[picked] if isinstance(ids, np.ndarray) else ids.take(picked).to_pylist()
    return list(dict.fromkeys(str(x) for x in values))[:limit]


def text_eq(table, name: str, value: str) -> np.ndarray:
    """(rows,) bool: string column `name` equals `value` (computed in Arrow, no Python strings)."""
    import pyarrow.compute as pc

    return pc.fill_null(pc.equal(table.column(name), value), False).to_numpy(zero_copy_only=False)


def text_in(table, name: str, values: Iterable[str]) -> np.ndarray:
    """(rows,) bool: string column `name` is one of `values`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.is_in(table.column(name), value_set=pa.array(list(values), type=pa.string())).to_numpy(zero_copy_only=False)


def nonempty(table, name: str) -> np.ndarray:
    """(rows,) bool: string column `name` is neither null nor ""."""
    import pyarrow.compute as pc

    return pc.fill_null(pc.greater(pc.utf8_length(table.column(name)), 0), False).to_numpy(zero_copy_only=False)


def codes(table, name: str) -> tuple[np.ndarray, list[str]]:
    """Dictionary-encode a string column: (rows,) int codes and the label of each code."""
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(pc.fill_null(table.column(name), "").combine_chunks())
    return encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64), [str(x) for x in encoded.dictionary.to_pylist()]


def mean_by(table, name: str, values: np.ndarray) -> dict[str, float]:
    """Mean of `values` per label of string column `name` (e.g. per stratum)."""
    if table.num_rows == 0:
        return {}
    code, labels = codes(table, name)
    sums = np.bincount(code, weights=values.astype(np.float64), minlength=len(labels))
    counts = np.bincount(code, minlength=len(labels))
    return {label: float(s / c) for label, s, c in sorted(zip(labels, sums, counts)) if c}


def frac(mask: np.ndarray) -> float:
    return float(mask.mean()) if len(mask) else 0.0


def percentiles(values: np.ndarray, qs=(50, 90, 99)) -> dict[int, float]:
    if len(values) == 0:
        return {}
    return {q: float(v) for q, v in zip(qs, np.percentile(values, qs))}


def by_stratum(strata: np.ndarray, values: np.ndarray) -> dict[str, float]:
    """Mean of `values` per stratum label (one pass: np.unique + bincount)."""
    if len(values) == 0:
        return {}
    labels, inverse = np.unique(strata, return_inverse=True)
    sums = np.bincount(inverse, weights=values.astype(np.float64), minlength=len(labels))
    counts = np.bincount(inverse, minlength=len(labels))
    return {str(label): float(s / c) for label, s, c in zip(labels, sums, counts)}


def metric_key(*parts: str) -> str:
    """Join key parts, replacing characters that would break a namespaced key."""
    return "/".join(str(p).replace("/", "_").replace(" ", "_") if i else str(p) for i, p in enumerate(parts))


@dataclass
class GroupIndex:
    """Rows of a rollouts table grouped by (step, group), as sorted segments."""

    order: np.ndarray  # (rows,) row indices sorted by group
    starts: np.ndarray  # (groups,) segment start in `order`
    sizes: np.ndarray  # (groups,)
    gid: np.ndarray  # (rows,) group number of each row (in table order)
    step: np.ndarray  # (groups,) training step of each group

    @property
    def n_groups(self) -> int:
        return len(self.starts)

    def sum(self, values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values[self.order].astype(np.float64), self.starts)  # (groups,)

    def mean(self, values: np.ndarray) -> np.ndarray:
        return self.sum(values) / self.sizes

    def std(self, values: np.ndarray) -> np.ndarray:
        """Population std within each group (two-pass, so exact zeros stay zero)."""
        v = values[self.order].astype(np.float64)
        mean = np.add.reduceat(v, self.starts) / self.sizes  # (groups,)
        dev = v - np.repeat(mean, self.sizes)
        return np.sqrt(np.add.reduceat(dev * dev, self.starts) / self.sizes)

    def max(self, values: np.ndarray) -> np.ndarray:
        return np.maximum.reduceat(values[self.order], self.starts)

    def min(self, values: np.ndarray) -> np.ndarray:
        return np.minimum.reduceat(values[self.order], self.starts)

    def broadcast(self, per_group: np.ndarray) -> np.ndarray:
        """Per-group values back onto rows, in table order."""
        return per_group[self.gid]

    def _thirds(self) -> tuple[np.ndarray, int]:
        """The distinct training steps, and how many make a third (at least one)."""
        steps = np.unique(self.step)
        return steps, max(1, int(np.ceil(len(steps) / 3)))

    def recent(self) -> np.ndarray:
        """(groups,) bool: the group belongs to the last third of training steps."""
        steps, third = self._thirds()
        return self.step >= steps[len(steps) - third]

    def first(self) -> np.ndarray:
        """(groups,) bool: the group belongs to the first third of training steps."""
        steps, third = self._thirds()
        return self.step <= steps[third - 1]


def group_index(steps: np.ndarray, groups: np.ndarray) -> GroupIndex:
    key = steps.astype(np.int64) * (int(groups.max(initial=0)) + 1) + groups.astype(np.int64)  # (rows,)
    order = np.argsort(key, kind="stable")  # near-linear when the file is already in step order
    sorted_key = key[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_key[1:] != sorted_key[:-1]))) if len(key) else np.zeros(0, np.int64)
    sizes = np.diff(np.append(starts, len(key)))
    gid = np.empty(len(key), dtype=np.int64)
    gid[order] = np.repeat(np.arange(len(starts)), sizes)
    return GroupIndex(order, starts, sizes, gid, steps[order][starts].astype(np.int64) if len(key) else np.zeros(0, np.int64))


def groups(ctx) -> GroupIndex | None:
    """The (step, group) index of `ctx.rollouts`, computed once per diagnosis (None without rollouts)."""
    table = ctx.rollouts
    if table is None or table.num_rows == 0:
        return None
    if "groups" not in ctx.cache:
        ctx.cache["groups"] = group_index(col(table, "step"), col(table, "group"))
    return ctx.cache["groups"]


def ngrams(ctx, n: int = 4) -> NgramStats | None:
    """N-gram repetition of every rollout's `completion_tokens`, computed once per diagnosis."""
    table = ctx.rollouts
    if not has(table, "completion_tokens"):
        return None
    key = f"ngrams/{n}"
    if key not in ctx.cache:
        ctx.cache[key] = ngram_stats(table.column("completion_tokens"), n)
    return ctx.cache[key]


def list_contains(table, name: str, values: Iterable[str]) -> np.ndarray:
    """(rows,) bool: the list<string> column holds any of `values`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = table.column(name)
    parents = pc.list_parent_indices(column).to_numpy()  # (items,) row of each list item
    hit = pc.is_in(pc.list_flatten(column), value_set=pa.array(list(values), type=pa.string())).to_numpy(zero_copy_only=False)
    out = np.zeros(table.num_rows, dtype=bool)
    out[parents[hit]] = True
    return out


def regex_mask(table, names: Iterable[str], pattern: str) -> np.ndarray:
    """(rows,) bool: `pattern` (RE2 syntax) matches any of the named text or list<string> columns."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = np.zeros(table.num_rows, dtype=bool)
    for name in names:
        if not has(table, name):
            continue
        column = table.column(name)
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            column = pc.binary_join(column, "\n")
        out |= pc.fill_null(pc.match_substring_regex(column, pattern), False).to_numpy(zero_copy_only=False)
    return out



def required_literals(pattern: str) -> list[str] | None:
    """Strings of which every match of `pattern` (RE2 syntax) contains at least one, or None.

    Lets a column chunk whose text holds none of them skip the regex (see
    `regex_mask_prefiltered`). The pattern is read with Python's regex parser,
    which agrees with RE2 on literals, groups, alternations and repeats; where the
    two could read a pattern differently (POSIX classes `[[:alpha:]]`, which Python
    cannot parse as one class) or a literal is not certain (case-insensitive
    flags, an optional part), no literal is claimed. None only means no shortcut.
    """
    import re
    import warnings

    if "[:" in pattern:
        return None
    try:
        from re import _constants as sre_c
        from re import _parser as sre_parse

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parsed = sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - RE2-only syntax (\Q..\E, \p{..}, ...): no shortcut
        return None
    if parsed.state.flags & re.IGNORECASE:
        return None

    def required(items) -> list[str] | None:
        """Best alternative set for a sequence: each candidate is a list of strings, one of which must occur."""
        candidates, run = [], []
        for op, av in list(items) + [(None, None)]:  # the sentinel flushes the last run
            if op is sre_c.LITERAL:
                run.append(chr(av))
                continue
            if run:
                candidates.append(["".join(run)])
                run = []
            if op is sre_c.SUBPATTERN and not av[1] & re.IGNORECASE:
                inner = required(av[3])
            elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT) and av[0] >= 1:
                inner = required(av[2])
            elif op is sre_c.BRANCH:
                branches = [required(b) for b in av[1]]
                inner = [s for b in branches for s in b] if all(branches) else None
            else:
                inner = None  # zero-width assertions, classes, optional parts: nothing certain
            if inner:
                candidates.append(inner)
        # Prefer the set whose shortest string is longest (fewer false candidates), then the smaller set.
        return max(candidates, key=lambda c: (min(map(len, c)), -len(c)), default=None)

    found = set(required(parsed) or ())
    if not found or not all(found):
        return None
    return sorted(s for s in found if not any(o != s and o in s for o in found))  # "git" covers ".git/"


def text_may_contain(column, literals: Iterable[str]) -> bool:
    """Whether any row of a string (or list<string>) column could contain one of `literals`.

    False is certain: no row holds any of them (e.g. no `<think>` anywhere, so
    counting tags can be skipped). Costs one scan of each chunk's text buffer.
    """
    needles = [str(lit).encode("utf-8") for lit in literals]
    chunks = column.chunks if hasattr(column, "chunks") else [column]
    return any(_text_may_contain(chunk, needles) for chunk in chunks)


def _text_may_contain(array, literals: list[bytes]) -> bool:
    """Whether any row of a string (or list<string>) array could contain one of `literals`.

    One search over the array's whole UTF-8 data buffer (the span its offsets
    cover), so a chunk without any literal costs a memory scan, not a per-row
    regex. False only when certain; unknown types answer True.
    """
    import re

    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        if any(b"\n" in lit for lit in literals):
            return True  # the joined text could form it across items
        array = pc.list_flatten(array)  # a literal without "\n" in the joined text lies inside one item
    large = pa.types.is_large_string(array.type)
    if not (pa.types.is_string(array.type) or large):
        return True
    if len(array) == 0:
        return False
    buffers = array.buffers()
    if buffers[2] is None:
        return False  # every string is empty
    dtype = np.dtype(np.int64 if large else np.int32)
    first, last = (int(np.frombuffer(buffers[1], dtype=dtype, count=1, offset=i * dtype.itemsize)[0])
                   for i in (array.offset, array.offset + len(array)))
    text = memoryview(buffers[2])[first:last]  # zero-copy
    return any(re.search(re.escape(lit), text) is not None for lit in literals)


def regex_mask_prefiltered(table, names: Iterable[str], pattern: str) -> np.ndarray:
    """`regex_mask`, but column chunks that hold none of the pattern's required literals are skipped.

    Same result as `regex_mask(table, names, pattern)`. Signatures such as
    `\\bgit\\s+log` rarely occur, so most chunks are ruled out by one buffer
    search (a few ms per 40 MB) instead of an RE2 call per row.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    literals = required_literals(pattern)
    if literals is None:
        return regex_mask(table, names, pattern)
    needles = [lit.encode("utf-8") for lit in literals]
    out = np.zeros(table.num_rows, dtype=bool)
    for name in names:
        if not has(table, name):
            continue
        start = 0
        for chunk in table.column(name).chunks:
            if _text_may_contain(chunk, needles):
                text = pc.binary_join(chunk, "\n") if pa.types.is_list(chunk.type) or pa.types.is_large_list(chunk.type) else chunk
                out[start:start + len(chunk)] |= pc.fill_null(pc.match_substring_regex(text, pattern), False).to_numpy(zero_copy_only=False)
            start += len(chunk)
    return out


def is_multi_turn(ctx, tables=None) -> bool:
    """Whether the domain runs episodes of several turns: the recipe says so, or an
    episode of `tables` (default: this run's rollouts and eval) took more than one
    turn or was cut off by the turn limit (an environment that would have gone on:
    e.g. a calculator call on the only turn `max_turns: 1` allows)."""
    if (turn_limit(ctx) or 1) > 1 or ctx.domain in ("swe", "sandbox"):
        return True
    for table in ((ctx.rollouts, ctx.eval) if tables is None else tables):
        if not has(table, "turns") or not table.num_rows:
            continue
        if int(np.max(col(table, "turns"))) > 1 or (has(table, "finish_reason") and text_eq(table, "finish_reason", "max_turns").any()):
            return True
    return False


def turn_limit(ctx) -> int | None:
    """The run's turn limit, `domain.options.max_turns` (the domain's default where the recipe leaves it out,
    `evo.harness.diagnose`), or None for a domain that has none."""
    options = ((ctx.recipe or {}).get("domain") or {}).get("options") or {}
    limit = options.get("max_turns")
    return int(limit) if isinstance(limit, int) and not isinstance(limit, bool) else None


def thirds(metrics: list[dict], key: str) -> tuple[float, float] | None:
    """Mean of `key` over the first and the last third of logged steps (None if < 3 values)."""
    values = np.array([m[key] for m in metrics if isinstance(m.get(key), (int, float)) and np.isfinite(m[key])], dtype=np.float64)
    if len(values) < 3:
        return None
    third = max(1, len(values) // 3)
    return float(values[:third].mean()), float(values[-third:].mean())


def trend(ctx, metrics_key: str, rollout_column: str | None = None) -> tuple[float, float] | None:
    """(first third, last third) of a logged metric; falls back to per-step means of a rollout column."""
    pair = thirds(ctx.metrics, metrics_key)
    table = ctx.rollouts
    if pair is None and rollout_column and has(table, rollout_column) and has(table, "step") and table.num_rows:
        steps = col(table, "step").astype(np.int64)
        sums = np.bincount(steps, weights=col(table, rollout_column, np.float64))
        counts = np.bincount(steps)
        present = counts > 0
        pair = thirds([{"v": float(v)} for v in sums[present] / counts[present]], "v")
    return pair


def glob_match(path: str, pattern: str) -> bool:
    """Match a repository path against a `paths.protected`-style glob (`evo.settings.path_matches`).

    The candidate guard's matcher, so the tampering audit and the guard never
    disagree on what `paths.protected` covers.
    """
    from evo.settings import path_matches

    return path_matches(path, pattern)


def empty() -> dict[str, Any]:
    return {"metrics": {}, "findings": []}
