"""Per-row n-gram repetition over a list<int> token column, without a loop over rows.

Repetition is the behavioural signature of the Echo Trap and of the
`repeated_ngram` anomaly rule. Looping over a million rows in Python would cost
minutes; instead every row's tokens are flattened into one array, each n-gram
gets a 64-bit rolling hash, and one sort of `(row, hash)` keys counts distinct
n-grams and the largest repeat count per row.

Hash collisions could merge two different n-grams of the same row; the key
keeps 32 bits of a well-mixed hash, so within a row of m n-grams the chance of
any collision is about m^2 / 2^33 (under 0.01% for m = 1,000).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_PRIME = np.uint64(1099511628211)  # FNV-1a 64-bit prime: odd, well spread bits
_MIX = np.uint64(0x9E3779B97F4A7C15)  # golden-ratio multiplier to mix the high bits


@dataclass
class NgramStats:
    n: int
    ngrams: np.ndarray  # (rows,) int64: number of n-grams in the row (0 when shorter than n)
    distinct: np.ndarray  # (rows,) int64: distinct n-grams in the row
    max_repeats: np.ndarray  # (rows,) int64: occurrences of the row's most frequent n-gram

    @property
    def distinct_ratio(self) -> np.ndarray:
        """(rows,) distinct / total n-grams; 1.0 for rows too short to repeat."""
        out = np.ones(len(self.ngrams), dtype=np.float64)
        has = self.ngrams > 0
        out[has] = self.distinct[has] / self.ngrams[has]
        return out


def ngram_stats(token_lists, n: int = 4) -> NgramStats:
    """Count n-grams of every row of a pyarrow list<int> array (chunked or not)."""
    import pyarrow.compute as pc

    lengths = pc.list_value_length(token_lists).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)  # (rows,)
    rows = len(lengths)
    flat = pc.list_flatten(token_lists).to_numpy(zero_copy_only=False).astype(np.uint64)  # (tokens,)
    ngram_counts = np.maximum(lengths - n + 1, 0)  # (rows,)
    empty = np.zeros(rows, dtype=np.int64)
    total = int(ngram_counts.sum())
    if total == 0:
        return NgramStats(n, ngram_counts, empty, empty.copy())

    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))  # (rows,) offset of each row in `flat`
    # Rolling hash at every position of `flat` from shifted views (no gathers); positions whose
    # n-gram would cross into the next row are dropped below.
    m = len(flat) - n + 1
    h = flat[:m].copy()  # (m,)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        for j in range(1, n):  # n is small; the loop is over n-gram width, not rows
            np.multiply(h, _PRIME, out=h)
            np.add(h, flat[j:m + j], out=h)
        np.multiply(h, _MIX, out=h)
    np.right_shift(h, np.uint64(32), out=h)
    row_of_ngram = np.repeat(np.arange(rows, dtype=np.uint64), ngram_counts)  # (total,)
    first_of_row = np.repeat(np.cumsum(ngram_counts) - ngram_counts, ngram_counts)  # (total,)
    begin = np.repeat(starts, ngram_counts) + (np.arange(total, dtype=np.int64) - first_of_row)  # (total,)
    keys = h[begin]  # (total,)
    np.bitwise_or(keys, row_of_ngram << np.uint64(32), out=keys)
    keys.sort()  # grouped by row, then by hash

    run_start = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))  # (runs,) one run per distinct n-gram
    run_len = np.diff(np.append(run_start, total))  # (runs,)
    run_row = keys[run_start] >> np.uint64(32)  # (runs,) ascending
    row_start = np.flatnonzero(np.concatenate(([True], run_row[1:] != run_row[:-1])))  # first run of each row with n-grams
    present = run_row[row_start].astype(np.int64)
    distinct = empty.copy()
    distinct[present] = np.diff(np.append(row_start, len(run_row)))
    max_repeats = empty.copy()
    max_repeats[present] = np.maximum.reduceat(run_len, row_start)
    return NgramStats(n, ngram_counts, distinct, max_repeats)
