"""The shortcuts that keep the harness fast give exactly the plain computation's answers.

n-grams are sorted within rows on padded grids, in blocks of rows; signature
regexes skip chunks that lack a literal every match needs; tag counts and submit
lookups are skipped where they cannot change the outcome. Each is checked
against a direct reference on the inputs where a shortcut could go wrong.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evo.harness import kit, ngrams
from evo.harness.context import AnalyzerContext, RunArtifacts

MULTI_TURN = {"domain": {"name": "sandbox", "options": {"max_turns": 10}}}
SWE = {"domain": {"name": "swe"}}
_MIX_INVERSE = pow(0x9E3779B97F4A7C15, -1, 2**64)


def _reference(row, n):
    grams = [tuple(row[i:i + n]) for i in range(len(row) - n + 1)]
    return len(grams), len(set(grams)), max([grams.count(g) for g in set(grams)], default=0)


def _token_hashing_to_padding(low: int) -> int:
    """A token whose 1-gram hash (and the 2-gram (0, token)'s) is 0xFFFFFFFF, the grids' padding value."""
    t = (((0xFFFFFFFF << 32) | low) * _MIX_INVERSE) % 2**64
    return t - 2**64 if t >= 2**63 else t


def _assert_matches_reference(array, rows, n):
    stats = ngrams.ngram_stats(array, n)
    got = list(zip(stats.ngrams.tolist(), stats.distinct.tolist(), stats.max_repeats.tolist()))
    assert got == [_reference(r or [], n) for r in rows]


def test_ngrams_whose_hash_equals_the_grid_padding_are_still_counted():
    pad = _token_hashing_to_padding(12345)
    rows = [[pad, 7, pad], [7, 8, pad], [pad, 9, pad, 9], [pad] * 5, [1, 2, 3, pad, 4], [1, pad, 1, 1]]
    _assert_matches_reference(pa.array(rows, type=pa.list_(pa.int64())), rows, 1)
    pairs = [[0, pad, 0, pad, 5], [3, 0, pad, 0, pad, 0, pad]]  # the 2-gram (0, pad) hashes to the padding value
    _assert_matches_reference(pa.array(pairs, type=pa.list_(pa.int64())), pairs, 2)


@pytest.mark.parametrize("n", [1, 2, 4])
def test_ngrams_across_row_blocks_chunks_slices_and_nulls(monkeypatch, n):
    monkeypatch.setattr(ngrams, "_BLOCK_TOKENS", 16)  # many blocks, some of one long row
    rng = np.random.default_rng(n)
    rows = []
    for i in range(120):
        length = int(rng.choice([0, 1, 3, 5, 9, 17, 40, 150]))
        rows.append(None if i % 17 == 0 else [int(x) for x in rng.integers(0, 3 if i % 2 else 1000, length)])
    flat = pa.array(rows, type=pa.list_(pa.int32()))
    chunked = pa.chunked_array([flat.slice(0, 50), flat.slice(50, 1), flat.slice(51)])
    _assert_matches_reference(chunked, rows, n)
    _assert_matches_reference(flat.slice(5, 60), rows[5:65], n)


@pytest.mark.parametrize("pattern, literals", [
    (r"\bgit\s+(log|show|diff)\b", ["git"]),
    (r"(?:\bgit\s+log\b)|(?:(^|[\s/'\"=:])\.git/)", ["git"]),  # ".git/" contains "git"
    (r"curl\s+https?://", ["curl"]),
    (r"(ab)+cd|xyz", ["ab", "xyz"]),
    (r"(?i)git\s+log", None),  # case-insensitive: no literal is certain
    (r"g(?i:IT)", ["g"]),
    (r"a?|b", None),
    (r"[[:alpha:]]+]", None),  # a POSIX class Python would read as a set then "]"
    (r"\Qa.b\E", None),  # RE2-only syntax
])
def test_required_literals(pattern, literals):
    assert kit.required_literals(pattern) == literals


def _texts(rng, n):
    words = ["git", " log", "show", ".git/", "x", "", " ", "\n", "gi", "t", "GIT", "héllo", "/"]
    return ["".join(rng.choice(words, int(rng.integers(0, 6)))) for _ in range(n)]


def test_prefiltered_regex_equals_the_plain_regex_mask():
    rng = np.random.default_rng(0)
    patterns = [r"\bgit\s+(log|show)\b", r"(^|[\s/'\"=:])\.git/", r"(?i)git\s+log", r"t\ngi", r"héllo", r"g(?i:it)"]
    hits = 0
    for trial in range(12):
        n = 40
        strings = [None if rng.random() < 0.1 else s for s in _texts(rng, n)]
        lists = [None if rng.random() < 0.1 else _texts(rng, int(rng.integers(0, 4))) for _ in range(n)]
        text = pa.array(strings, type=pa.large_string() if trial % 2 else pa.string())
        items = pa.array(lists, type=pa.list_(pa.string()))
        if trial % 3:  # chunks of which some hold no literal at all
            text = pa.chunked_array([text.slice(0, 3), text.slice(3, 30), text.slice(33)])
            items = pa.chunked_array([items.slice(0, 1), items.slice(1, 20), items.slice(21)])
        table = pa.table({"a": text, "b": items})
        for pattern in patterns:
            plain = kit.regex_mask(table, ["a", "b", "absent"], pattern)
            assert np.array_equal(kit.regex_mask_prefiltered(table, ["a", "b", "absent"], pattern), plain), pattern
            hits += int(plain.sum())
    assert hits > 50


def test_leakage_finds_a_hit_in_one_row_group_only(tmp_path, art):
    """Chunks without "git" are skipped; the one chunk holding it is still searched row by row."""
    completions = ["edit file; run tests"] * 48
    completions[41] = "then: git show HEAD~1"
    tools = [["bash"] for _ in range(48)]
    tools[7] = ["git", "log"]  # joined as "git\nlog": \s matches the newline between two calls
    run = tmp_path / "run"
    run.mkdir()
    pq.write_table(art.rollouts(completion=completions, tools=tools), run / "rollouts.parquet", row_group_size=8)
    ctx = AnalyzerContext(run=RunArtifacts(run), recipe=SWE)
    assert ctx.rollouts.column("completion").num_chunks == 6
    r = art.run_builtin("audit_leakage", ctx)
    assert r["metrics"]["behavior/leak_signature_hits"] == 2
    assert r["vetoes"][0]["evidence"]["rows"] == ["s0-g1-3", "s2-g2-1"]


def test_leakage_case_insensitive_signature_is_not_skipped(tmp_path, art):
    completions = ["print(1)"] * 48
    completions[3] = "$ GIT Log --all"
    settings = {"audits": {"leakage_signatures": [r"(?i)git\s+log"]}}
    r = art.run_builtin("audit_leakage", art.ctx_for(tmp_path, rollouts_t=art.rollouts(completion=completions), settings=settings))
    assert [v["evidence"]["rows"] for v in r["vetoes"]] == [["s0-g0-3"]]


@pytest.mark.parametrize("completions, unclosed", [
    (["plain answer 4", "no tags", None, ""], [False] * 4),  # no tag anywhere: counts skipped
    (["<think>a", "<think>b<think>c", "4", None], [True, True, False, False]),  # nothing ever closed
    (["<think>a</think>", "<think>a</think><think>b", "</think><think>", "<think><think>x</think>"],
     [False, True, False, True]),
])
def test_unclosed_reasoning_counts_tags_exactly(tmp_path, art, completions, unclosed):
    n = len(completions)
    eval_t = art.eval_table({f"t{i}": [1] for i in range(n)}, completion=completions)
    r = art.run_builtin("unclosed_reasoning", art.ctx_for(tmp_path, eval_t=eval_t))
    assert r["metrics"]["behavior/eval_unclosed_reasoning_frac"] == pytest.approx(sum(unclosed) / n)
    if sum(unclosed) / n >= 0.10:
        assert art.by_id(r, "behavior.unclosed_reasoning")["evidence"]["rows"] == [f"t{i}" for i in range(n) if unclosed[i]]


def test_idle_episode_that_submitted_is_not_an_idle_failure(tmp_path, art):
    n = 48
    finish, answer = ["eos"] * n, ["42"] * n
    tools = [["bash"] for _ in range(n)]
    turns, calls = [4] * n, [1] * n
    for i in range(0, 12):  # ran out, no answer, 8 of 10 turns idle, but called submit
        finish[i], answer[i], tools[i], turns[i], calls[i] = "max_turns", "", ["bash", "submit"], 10, 2
    for i in range(12, 24):  # the same without submit: idle failure
        finish[i], answer[i], tools[i], turns[i], calls[i] = "max_turns", "", ["bash", "bash"], 10, 2
    table = art.rollouts(finish_reason=finish, answer=answer, tools=tools, turns=turns, tool_calls=calls,
                         transcript=[json.dumps([])] * n)
    r = art.run_builtin("abandonment", art.ctx_for(tmp_path, rollouts_t=table, recipe=MULTI_TURN))
    assert r["metrics"]["behavior/idle_failure_frac"] == pytest.approx(12 / 48)
    assert r["metrics"]["behavior/abandonment_frac"] == 0.0
    assert art.by_id(r, "behavior.idle_failure")["evidence"]["rows"][0] == "s0-g3-0"  # row 12
