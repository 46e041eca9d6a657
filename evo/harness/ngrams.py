"""Per-row n-gram repetition over a list<int> token column, without a loop over rows.

Repetition is the behavioural signature of the Echo Trap and of the
`repeated_ngram` anomaly rule. Looping over a million rows in Python would cost
minutes; instead each n-gram gets a 32-bit hash (the high half of a mixed
64-bit rolling hash), computed over the flattened token array in cache-sized
slices, and each row's hashes are sorted *within the row*: rows of similar
length are gathered into a (rows, W) grid (W = the next power of two, padded
with the largest uint32) and sorted along axis 1. Sorting many short rows is
several times cheaper than one global sort of (row, hash) keys, and the padding
costs at most 2x. Neighbouring unequal hashes then count distinct n-grams, and
run lengths give the largest repeat count (only for rows that repeat at all).

Hash collisions could merge two different n-grams of the same row; the hash
keeps 32 well-mixed bits, so within a row of m n-grams the chance of any
collision is about m^2 / 2^33 (under 0.01% for m = 1,000).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_PRIME = np.uint64(1099511628211)  # FNV-1a 64-bit prime: odd, well spread bits
_MIX = np.uint64(0x9E3779B97F4A7C15)  # golden-ratio multiplier to mix the high bits
_PAD = np.uint32(0xFFFFFFFF)  # grid padding; sorts after every real hash (or ties with it, see _block_stats)
_HASH_SLICE = 1 << 14  # tokens hashed per slice, so the n-1 multiply-adds stay in cache
_BLOCK_TOKENS = 1 << 20  # tokens per block of rows: bounds the memory of the hash array and grids


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
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = token_lists.chunks if isinstance(token_lists, pa.ChunkedArray) else [token_lists]
    lengths, distinct, max_repeats = [], [], []
    for chunk in chunks:
        chunk_lengths = pc.list_value_length(chunk).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)  # (rows,)
        tokens = pc.list_flatten(chunk).to_numpy(zero_copy_only=False)  # (tokens,) zero-copy for an unsliced chunk
        row_offsets = np.concatenate(([0], np.cumsum(chunk_lengths)))  # (rows + 1,)
        # Blocks of whole rows holding about _BLOCK_TOKENS tokens each (a longer row is a block of its own).
        cuts = np.unique(np.concatenate((np.searchsorted(row_offsets, np.arange(0, row_offsets[-1], _BLOCK_TOKENS)), [0, len(chunk_lengths)])))
        for a, b in zip(cuts[:-1], cuts[1:]):
            d, r = _block_stats(tokens[row_offsets[a]:row_offsets[b]], chunk_lengths[a:b], n)
            distinct.append(d)
            max_repeats.append(r)
        lengths.append(chunk_lengths)
    empty = np.zeros(0, dtype=np.int64)
    joined = lambda parts: np.concatenate(parts) if parts else empty  # noqa: E731
    return NgramStats(n, np.maximum(joined(lengths) - n + 1, 0), joined(distinct), joined(max_repeats))


def _hash_ngrams(tokens: np.ndarray, n: int, out: np.ndarray) -> None:
    """out[p] = 32-bit hash of the n-gram tokens[p:p+n], for every p where it fits in `tokens`.

    The same hash as ((t0*P + t1)*P + ...)*MIX >> 32 in wrapping uint64 arithmetic.
    """
    m = len(tokens) - n + 1
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps by design
        for a in range(0, m, _HASH_SLICE):  # a loop over cache-sized slices, not rows
            b = min(a + _HASH_SLICE, m)
            t = tokens[a:b + n - 1].astype(np.uint64)  # (b - a + n - 1,)
            h = t[:b - a].copy()  # (b - a,)
            for j in range(1, n):  # n is small; the loop is over n-gram width
                np.multiply(h, _PRIME, out=h)
                np.add(h, t[j:b - a + j], out=h)
            np.multiply(h, _MIX, out=h)
            np.right_shift(h, np.uint64(32), out=h)
            out[a:b] = h


def _block_stats(tokens: np.ndarray, lengths: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(distinct, max_repeats), each (rows,) int64, for consecutive rows whose tokens are `tokens`."""
    from numpy.lib.stride_tricks import sliding_window_view

    counts = np.maximum(lengths - n + 1, 0)  # (rows,) n-grams per row
    distinct = np.minimum(counts, 1)  # (rows,) final for rows with at most one n-gram
    max_repeats = distinct.copy()  # (rows,) 1 wherever every n-gram is distinct
    multi = np.flatnonzero(counts > 1)  # (k,) rows that could repeat
    if len(multi) == 0:
        return distinct, max_repeats
    starts = np.cumsum(lengths) - lengths  # (rows,) first token of each row in `tokens`
    multi_counts = counts[multi]  # (k,)
    # Grid width 2^e with 2^(e-1) < count <= 2^e; frexp is exact where log2 could round.
    width_log2 = np.frexp((multi_counts - 1).astype(np.float64))[1].astype(np.uint8)  # (k,)
    by_width = np.argsort(width_log2, kind="stable")  # (k,) rows grouped by grid width
    widest = 1 << int(width_log2.max())
    hashes = np.full(len(tokens) + widest, _PAD, dtype=np.uint32)  # (tokens + widest,) hash of the n-gram at each token
    _hash_ngrams(tokens, n, hashes)
    windows = sliding_window_view(hashes, widest)  # (tokens + 1, widest) view: the hashes from each position on
    for part in np.split(by_width, np.flatnonzero(np.diff(width_log2[by_width])) + 1):
        width = 1 << int(width_log2[part[0]])
        rows, c = multi[part], multi_counts[part]  # (r,), (r,)
        pad = np.where(np.arange(width + 1)[:, None] > np.arange(width)[None, :], np.uint32(0), _PAD)  # (width+1, width): row c pads columns >= c
        grid = windows[starts[rows], :width]  # (r, width) copy: each row's hashes, then its neighbours'
        grid |= pad[c]  # (r, width) the neighbours' hashes become padding
        grid.sort(axis=1)
        changes = np.count_nonzero(grid[:, 1:] != grid[:, :-1], axis=1)  # (r,)
        # The c real hashes sort first, so changes among them are distinct - 1; the step from the
        # last real hash into the padding (column c, when c < width) is not a new n-gram, unless that
        # hash equals the padding value itself, in which case no step was counted.
        last_real = grid[np.arange(len(rows)), c - 1]  # (r,)
        d = 1 + changes - ((c < width) & (last_real != _PAD))  # (r,)
        distinct[rows] = d
        repeating = np.flatnonzero(d < c)  # (q,) only these need run lengths
        if len(repeating):
            g, cq, dq = grid[repeating], c[repeating], d[repeating]  # (q, width), (q,), (q,)
            run_start = np.ones(g.shape, dtype=bool)  # (q, width)
            np.not_equal(g[:, 1:], g[:, :-1], out=run_start[:, 1:])
            starts_flat = np.flatnonzero(run_start[pad[cq] == 0])  # runs over the rows' real hashes, concatenated
            run_len = np.diff(np.append(starts_flat, int(cq.sum())))  # (runs,); every row starts a run
            max_repeats[rows[repeating]] = np.maximum.reduceat(run_len, np.cumsum(dq) - dq)
    return distinct, max_repeats
