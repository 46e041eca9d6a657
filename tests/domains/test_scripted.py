"""Scripted policies honour the generation contract of the real backends."""

from __future__ import annotations

import pytest
from scripted import CharTokenizer, ScriptedPolicy, WhitespaceTokenizer, reverse_patch_from_git_log

from evo.errors import TrainError


def test_queue_answers_one_prompt_each_then_fails_clearly():
    policy = ScriptedPolicy(["a", "b"])
    assert [g.text for g in policy.generate(["p1", "p2"], max_new_tokens=5)] == ["a", "b"]
    assert policy.prompts == ["p1", "p2"]
    with pytest.raises(TrainError, match="no response left for prompt #3"):
        policy.generate(["p3"], max_new_tokens=5)
    policy.enqueue("c")
    assert policy.generate(["p3"], max_new_tokens=5)[0].text == "c"


def test_finish_reasons_and_token_counts():
    policy = ScriptedPolicy(["12345678", "42\nmore", "ok"], cycle=True)
    cut, stopped, short = policy.generate(["x"] * 3, max_new_tokens=4, stop=["\n"])
    assert (cut.text, cut.finish_reason, len(cut.token_ids)) == ("1234", "length", 4)
    assert (stopped.text, stopped.finish_reason) == ("42\n", "stop")  # the stop string is kept, as HF does
    assert (short.text, short.finish_reason, short.token_ids) == ("ok", "eos", [ord("o"), ord("k")])


def test_token_level_interface_used_by_the_rollout_driver():
    seen = []
    policy = ScriptedPolicy(lambda ctx: seen.append(ctx) or "done")
    ids = policy.encode_prompt("hello") + policy.encode_observation(" world")
    (gen,) = policy.generate_ids([ids], max_new_tokens=10)
    assert seen == ["hello world"] and policy.decode(gen.token_ids) == "done"


def test_whitespace_tokenizer_round_trips_and_counts_words():
    tok = WhitespaceTokenizer()
    ids = tok.encode("to be  or not to be")
    assert len(ids) == 11 and tok.decode(ids) == "to be  or not to be"
    policy = ScriptedPolicy(["one two three four"], tokenizer=tok)
    (gen,) = policy.generate(["q"], max_new_tokens=3)
    assert (gen.text, gen.finish_reason) == ("one two", "length")
    assert CharTokenizer().decode(CharTokenizer().encode("é\n")) == "é\n"


def test_reverse_patch_undoes_the_newest_commit():
    log = ("commit 2\nAuthor: dev\n\n    Break it\n\ndiff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n"
           "@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n\ncommit 1\n\ndiff --git a/m.py b/m.py\n")
    patch = reverse_patch_from_git_log(log)
    assert patch.splitlines()[:4] == ["--- a/m.py", "+++ b/m.py", "@@ -1,2 +1,2 @@", " def f():"]
    assert "-    return 2" in patch and "+    return 1" in patch
