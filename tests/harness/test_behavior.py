"""Behavior analyzers on synthetic artifacts with answers computed by hand."""

import numpy as np
import pyarrow as pa
import pytest

from evo.harness.ngrams import ngram_stats

MULTI_TURN = {"domain": {"name": "swe", "options": {"max_turns": 10}}, "rollout": {"max_new_tokens": 100}}


def test_truncation_validation_per_stratum_and_training(tmp_path, art):
    scores = {f"e{i}": [1, 1] for i in range(2)} | {f"h{i}": [0, 0] for i in range(2)}
    strata = {"e0": "easy", "e1": "easy", "h0": "hard", "h1": "hard"}
    # rows in order e0,e0,e1,e1,h0,h0,h1,h1: two hard samples truncated
    eval_t = art.eval_table(scores, strata, truncated=[False] * 4 + [True, False, True, False])
    train_trunc = np.zeros(48, bool)
    train_trunc[32:40] = True  # half of the last step
    r = art.run_builtin("truncation", art.ctx_for(tmp_path, eval_t=eval_t, rollouts_t=art.rollouts(truncated=train_trunc)))
    m = r["metrics"]
    assert m["behavior/truncated_frac"] == 0.25
    assert m["behavior/truncated_frac/hard"] == 0.5 and m["behavior/truncated_frac/easy"] == 0.0
    assert m["behavior/train_truncated_frac"] == pytest.approx(8 / 48)
    assert m["behavior/train_truncated_frac_recent"] == 0.5
    f = art.by_id(r, "behavior.truncation")
    assert f["message"] == "25% of validation responses hit the token limit (hard stratum: 50%)"
    assert f["evidence"]["rows"] == ["h0", "h1"]


def test_truncation_says_which_limit_cut_the_episode(tmp_path, art):
    """Multi-turn: a turn's action reaching max_new_tokens ("length") or the episode's budget running out."""
    finish = ["max_total_tokens"] * 3 + ["length", "eos", "max_turns"] * 2 + ["eos"] * 3
    truncated = [True] * 4 + [False] * 8
    eval_t = art.eval_table({f"t{i}": [0] for i in range(12)}, truncated=truncated, finish_reason=finish)
    r = art.run_builtin("truncation", art.ctx_for(tmp_path, eval_t=eval_t, recipe=MULTI_TURN))
    assert r["metrics"]["behavior/truncated_frac"] == pytest.approx(4 / 12)
    assert r["metrics"]["behavior/budget_cut_share"] == 0.75  # three of the four truncated episodes
    assert r["metrics"]["behavior/truncated_acting_frac"] == pytest.approx(4 / 12)  # no idle turns recorded: all acting


def test_budget_cut_episodes_that_idled_are_told_from_those_that_acted(tmp_path, art):
    """calc under a 24-token budget: call, observation, then the answer is cut (itself malformed, so idle): acting.
    Malformed actions whose error observations fill the budget: idling. The cut turn is left out of the count."""
    finish = ["max_total_tokens"] * 4 + ["stop"] * 4
    turns, idle = [2, 2, 3, 3] + [2] * 4, [1, 1, 3, 2] + [0] * 4
    eval_t = art.eval_table({f"t{i}": [0] for i in range(8)}, truncated=[True] * 4 + [False] * 4, finish_reason=finish,
                            turns=turns, idle_turns=idle)
    m = art.run_builtin("truncation", art.ctx_for(tmp_path, eval_t=eval_t, recipe=MULTI_TURN))["metrics"]
    assert m["behavior/budget_cut_share"] == 1.0
    assert m["behavior/budget_cut_idle_share"] == 0.5  # the two 3-turn episodes idled in their 2 turns before the cut
    # what a length limit can be blamed for: the four truncated episodes less the two that idled into the cut
    assert m["behavior/truncated_acting_frac"] == 2 / 8


def test_an_episode_whose_actions_a_turn_limit_cut_is_not_blamed_on_the_budget(tmp_path, art):
    """calc at max_new_tokens 8: "calc 74+" is cut, the error observation follows, the next actions idle until the
    episode's 64 tokens run out. It ends on the budget, but a longer turn is what it lacked (`turns_cut`)."""
    finish = ["max_total_tokens"] * 4 + ["stop"] * 4
    turns, idle, cut = [3, 3, 3, 3] + [2] * 4, [3, 3, 3, 3] + [0] * 4, [1, 1, 1, 0] + [0] * 4
    eval_t = art.eval_table({f"t{i}": [0] for i in range(8)}, truncated=[True] * 4 + [False] * 4, finish_reason=finish,
                            turns=turns, idle_turns=idle, turns_cut=cut)
    m = art.run_builtin("truncation", art.ctx_for(tmp_path, eval_t=eval_t, recipe=MULTI_TURN))["metrics"]
    assert m["behavior/budget_cut_share"] == 0.25  # only the episode no turn's limit cut
    assert m["behavior/budget_cut_idle_share"] == 1.0
    assert m["behavior/truncated_acting_frac"] == 3 / 8  # the three the turn's limit cut, idle or not
    # The same table recorded before `turns_cut`: the last turn's finish reason alone, every cut on the budget.
    old = eval_t.drop_columns(["turns_cut"])
    m = art.run_builtin("truncation", art.ctx_for(tmp_path / "old", eval_t=old, recipe=MULTI_TURN))["metrics"]
    assert m["behavior/budget_cut_share"] == 1.0 and m["behavior/truncated_acting_frac"] == 0.0


def test_truncation_quiet_when_rare(tmp_path, art):
    eval_t = art.eval_table({f"t{i}": [1] for i in range(20)}, truncated=[True] + [False] * 19)
    r = art.run_builtin("truncation", art.ctx_for(tmp_path, eval_t=eval_t))
    assert r["metrics"]["behavior/truncated_frac"] == 0.05 and r["findings"] == []


def test_length_percentiles_and_budget(tmp_path, art):
    lengths = np.arange(1, 49) * 2  # 2..96
    eval_lengths = [92, 95, 99, 100, 100, 100, 100, 100]
    eval_t = art.eval_table({"a": [1] * 4, "b": [0] * 4}, num_tokens=eval_lengths)
    tokens = [[7] * int(n) for n in lengths]
    recipe = {"rollout": {"max_new_tokens": 100}}
    r = art.run_builtin("lengths", art.ctx_for(tmp_path, rollouts_t=art.rollouts(completion_tokens=tokens), eval_t=eval_t, recipe=recipe))
    m = r["metrics"]
    for q in (50, 90, 99):
        assert m[f"behavior/length_p{q}"] == pytest.approx(np.percentile(lengths, q))
    assert m["behavior/eval_length_p50"] == 100 and m["behavior/eval_length_at_limit_frac"] == 5 / 8
    assert m["behavior/length_budget"] == 100
    f = art.by_id(r, "behavior.length_near_limit")
    assert "validation" in f["message"] and f["evidence"]["rows"] == ["a", "b"]  # each task cited once


def test_unclosed_reasoning_and_truncation_coupling(tmp_path, art):
    completions = ["<think>ok</think> 4", "<think>long", "<think>x", "4"] * 2
    eval_t = art.eval_table({f"t{i}": [1] for i in range(8)}, completion=completions,
                            truncated=[False, True, False, False] * 2)
    r = art.run_builtin("unclosed_reasoning", art.ctx_for(tmp_path, eval_t=eval_t))
    m = r["metrics"]
    assert m["behavior/eval_unclosed_reasoning_frac"] == 0.5
    assert m["behavior/eval_unclosed_truncated_frac"] == 0.5
    f = art.by_id(r, "behavior.unclosed_reasoning")
    assert f["evidence"]["rows"] == ["t1", "t2", "t5", "t6"] and "50% of them are truncated" in f["message"]


def test_turn_distribution_in_multi_turn_domain(tmp_path, art):
    turns = np.tile([1, 2, 3, 10], 12)
    finish = np.where(turns == 10, "max_turns", "eos")
    table = art.rollouts(turns=turns, finish_reason=finish.tolist(), tool_calls=np.maximum(turns - 1, 0))
    r = art.run_builtin("turns", art.ctx_for(tmp_path, rollouts_t=table, recipe=MULTI_TURN))
    m = r["metrics"]
    assert m["behavior/turns_mean"] == 4.0 and m["behavior/turns_max"] == 10
    assert m["behavior/turns_p50"] == 2.5 and m["behavior/one_turn_frac"] == 0.25
    assert m["behavior/max_turns_frac"] == 0.25
    assert m["behavior/tool_cut_off_frac"] == pytest.approx(1 / 3)  # of the 36 episodes that called a tool
    f = art.by_id(r, "behavior.max_turns_hit")
    assert f["evidence"]["rows"][0] == "s2-g0-3"
    assert art.by_id(r, "behavior.tool_cut_off")["evidence"]["values"]["tool_cut_off_frac"] == pytest.approx(1 / 3)


def test_a_one_turn_limit_that_cuts_off_every_tool_call(tmp_path, art):
    """calc under `max_turns: 1`: a calculator call takes the only turn, so its result is never answered.
    Few episodes call (the policy learns not to), so the share at the limit stays low; among the callers it is all."""
    calls = np.zeros(160, int)
    calls[::10] = 1  # 16 callers, the fewest the share is claimed over
    finish = np.where(calls > 0, "max_turns", "stop")
    table = art.rollouts(10, turns=[1] * 160, tool_calls=calls, finish_reason=finish.tolist())
    recipe = {"domain": {"name": "calc", "options": {"tool": True, "max_turns": 1}}}
    r = art.run_builtin("turns", art.ctx_for(tmp_path, rollouts_t=table, recipe=recipe))
    m = r["metrics"]
    assert m["behavior/max_turns_frac"] == pytest.approx(16 / 160) and m["behavior/tool_cut_off_frac"] == 1.0
    assert art.ids(r) == {"behavior.tool_cut_off"}
    callers = [t for t, c in zip(table.column("traj_id").to_pylist(), calls) if c]
    cited = art.by_id(r, "behavior.tool_cut_off")["evidence"]["rows"]
    assert cited and cited == callers[:len(cited)]  # the cut-off callers, in order (as many as a finding cites)
    answered_at_once = art.rollouts(turns=[1] * 48, tool_calls=[0] * 48, finish_reason=["stop"] * 48)
    quiet = art.run_builtin("turns", art.ctx_for(tmp_path, "b", rollouts_t=answered_at_once, recipe=recipe))
    assert quiet["metrics"] == {}  # one turn, nothing cut off: nothing says the domain has more turns to give


def test_two_stray_calls_say_nothing_about_the_turn_limit(tmp_path, art):
    """calc with the calculator withheld under `max_turns: 1`: two episodes in 160 still try to call it, and
    both end at the limit. A share over two episodes is no evidence that the limit cuts the tool off (a probe
    raised the turn limit on it, where the tool was what was missing)."""
    calls = np.zeros(160, int)
    calls[[7, 99]] = 1
    table = art.rollouts(10, turns=[1] * 160, tool_calls=calls, finish_reason=np.where(calls > 0, "max_turns", "stop").tolist())
    recipe = {"domain": {"name": "calc", "options": {"tool": False, "max_turns": 1}}}
    r = art.run_builtin("turns", art.ctx_for(tmp_path, rollouts_t=table, recipe=recipe))
    assert "behavior/tool_cut_off_frac" not in r["metrics"] and "behavior.tool_cut_off" not in art.ids(r)
    assert r["metrics"]["behavior/max_turns_frac"] == pytest.approx(2 / 160)


def test_turns_silent_for_single_turn_domain(tmp_path, art):
    r = art.run_builtin("turns", art.ctx_for(tmp_path, rollouts_t=art.rollouts(), recipe={"domain": {"name": "arithmetic"}}))
    assert r == {"metrics": {}, "findings": [], "vetoes": [], "audit": False}


def _reference_ngrams(tokens, n):
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams), len(set(grams)), max([grams.count(g) for g in set(grams)], default=0)


def test_ngram_stats_match_a_python_reference_and_the_training_filter():
    from evo.train.filters import max_ngram_repeats

    rng = np.random.default_rng(0)
    rows = [list(rng.integers(0, 4, size=int(k))) for k in rng.integers(0, 40, size=200)] + [[], [5, 5, 5], [1, 2, 3, 4] * 9]
    stats = ngram_stats(pa.array(rows, type=pa.list_(pa.int32())), 3)
    for i, row in enumerate(rows):
        total, distinct, top = _reference_ngrams(row, 3)
        assert (stats.ngrams[i], stats.distinct[i], stats.max_repeats[i]) == (total, distinct, top)
        assert stats.max_repeats[i] == max_ngram_repeats(row, 3)
    chunked = pa.chunked_array([pa.array(rows[:100], type=pa.list_(pa.int32())), pa.array(rows[100:], type=pa.list_(pa.int32()))])
    assert np.array_equal(ngram_stats(chunked, 3).distinct, stats.distinct)


def test_echo_trap_long_repetitive_and_rewarded(tmp_path, art):
    normal = [list(range(100 + i, 120 + i)) for i in range(48)]  # 20 distinct tokens each
    tokens = list(normal)
    echo_rows = [32, 36]  # step 2, samples 0 of groups 0 and 1: rewarded (reward 1 in [1,0,1,0])
    repetitive_but_failed = 33  # reward 0: not competitive
    for i in echo_rows + [repetitive_but_failed]:
        tokens[i] = [1, 2, 3, 4, 5] * 10  # 50 tokens, 5 distinct 4-grams of 47
    r = art.run_builtin("repetition", art.ctx_for(tmp_path, rollouts_t=art.rollouts(completion_tokens=tokens)))
    m = r["metrics"]
    assert m["behavior/repetitive_frac"] == pytest.approx(3 / 48)
    assert m["behavior/echo_trap_count"] == 2
    assert m["behavior/echo_trap_frac_recent"] == pytest.approx(2 / 16)
    f = art.by_id(r, "behavior.echo_trap")
    assert f["severity"] == "warning" and f["evidence"]["rows"] == ["s2-g0-0", "s2-g1-0"]
    assert art.run_builtin("repetition", art.ctx_for(tmp_path, "healthy", rollouts_t=art.rollouts(completion_tokens=normal)))["findings"] == []


def test_abandonment_and_idle_failure(tmp_path, art):
    n = 48
    finish = ["eos"] * n
    answer = ["42"] * n
    tools = [["bash", "submit"] for _ in range(n)]
    turns, calls = [4] * n, [2] * n
    for i in range(0, 12):  # abandoned: stopped itself, no answer, no submit
        answer[i], tools[i] = "", ["bash"]
    for i in range(12, 16):  # stopped without answer but submitted: not abandoned
        answer[i] = ""
    for i in range(16, 28):  # idle failure: ran out of turns, 8 of 10 turns without a tool call
        finish[i], answer[i], tools[i], turns[i], calls[i] = "max_turns", "", ["bash", "bash"], 10, 2
    for i in range(28, 30):  # ran out but busy: not idle
        finish[i], answer[i], tools[i], turns[i], calls[i] = "max_turns", "", ["bash"] * 9, 10, 9
    table = art.rollouts(finish_reason=finish, answer=answer, tools=tools, turns=turns, tool_calls=calls)
    r = art.run_builtin("abandonment", art.ctx_for(tmp_path, rollouts_t=table, recipe=MULTI_TURN))
    m = r["metrics"]
    assert m["behavior/abandonment_frac"] == pytest.approx(12 / 48)
    assert m["behavior/idle_failure_frac"] == pytest.approx(12 / 48)
    idle = 12 * 2 + 4 * 2 + 12 * 8 + 2 * 1 + 18 * 2
    assert m["behavior/idle_turn_frac"] == pytest.approx(idle / (12 * 4 + 4 * 4 + 12 * 10 + 2 * 10 + 18 * 4))
    assert art.by_id(r, "behavior.abandonment")["evidence"]["rows"][0] == "s0-g0-0"
    assert art.by_id(r, "behavior.idle_failure")["evidence"]["rows"][0] == "s1-g0-0"


def test_idle_turns_are_the_domains_count_where_it_keeps_one(tmp_path, art):
    """A calc episode `calc 12*3` then `answer 36` has two turns, one tool call and no idle turn: the final
    answer is an action. turns - tool_calls would call half of all turns idle; the domain's count says none."""
    n = 48
    idle = [0] * 24 + [1] * 12 + [None] * 12  # None: a domain that keeps no count (fallback: turns - tool_calls)
    table = art.rollouts(turns=[2] * n, tool_calls=[1] * n, tools=[["calc"] for _ in range(n)])
    table = table.append_column("idle_turns", pa.array(idle, pa.int32()))
    m = art.run_builtin("abandonment", art.ctx_for(tmp_path, rollouts_t=table, recipe=MULTI_TURN))["metrics"]
    assert m["behavior/idle_turn_frac"] == pytest.approx((12 * 1 + 12 * 1) / (48 * 2))


def test_tool_use_rates_shares_and_score_lift(tmp_path, art):
    tools = [["python"], ["python", "python", "search"], [], []] * 12
    table = art.rollouts(tools=tools, tool_calls=[len(t) for t in tools])
    eval_tools = [["python"], [], ["python"], []]
    eval_t = art.eval_table({"a": [1, 0], "b": [1, 0]}, tools=eval_tools, tool_calls=[len(t) for t in eval_tools])
    r = art.run_builtin("tool_use", art.ctx_for(tmp_path, rollouts_t=table, eval_t=eval_t))
    m = r["metrics"]
    assert m["behavior/tool_use_frac"] == 0.5 and m["behavior/tool_calls_mean"] == 1.0
    assert m["behavior/tool_share/python"] == pytest.approx(0.75) and m["behavior/tool_share/search"] == pytest.approx(0.25)
    assert m["behavior/eval_tool_use_frac"] == 0.5
    assert m["behavior/eval_score_with_tools"] == 1.0 and m["behavior/eval_score_without_tools"] == 0.0
    assert r["findings"] == []


def test_no_tool_use_in_multi_turn_domain_warns(tmp_path, art):
    r = art.run_builtin("tool_use", art.ctx_for(tmp_path, rollouts_t=art.rollouts(), recipe=MULTI_TURN))
    assert art.by_id(r, "behavior.no_tool_use")["severity"] == "warning"


def test_answers_that_ignore_the_tools_result_are_measured_by_stratum(tmp_path, art):
    """Hard episodes are handed the value and answer another; easy ones copy it; a quarter make no call."""
    n = 48
    strata = ["easy" if (i // 4) % 2 == 0 else "hard" for i in range(n)]
    results = [None if i % 4 == 3 else (str(i) if strata[i] == "easy" else str(i + 1000)) for i in range(n)]
    table = art.rollouts(tool_result=results, tool_calls=[int(r is not None) for r in results],
                         tools=[["calc"] if r is not None else [] for r in results])
    eval_t = art.eval_table({"e": [1, 1, 1, 0], "h": [0, 0, 0, 0]}, {"e": "easy", "h": "hard"},
                            answer=["7", " 7", "7", "", "9", "8", "9", "9"],
                            tool_result=["7", "7", None, "7", "9", "9", "10", "11"])
    r = art.run_builtin("tool_use", art.ctx_for(tmp_path, rollouts_t=table, eval_t=eval_t, recipe=MULTI_TURN))
    m = r["metrics"]
    assert m["behavior/tool_result_ignored_frac"] == 0.5 and m["behavior/tool_result_answered_frac"] == 0.75
    # validation: easy holds 2 answered with a result (blanks do not count), hard 4 of which 3 answered another
    assert m["behavior/eval_tool_result_ignored_frac"] == pytest.approx(3 / 6)
    assert m["behavior/eval_tool_result_ignored_frac/easy"] == 0.0
    assert m["behavior/eval_tool_result_ignored_frac/hard"] == 0.75
    f = art.by_id(r, "behavior.tool_result_ignored")
    assert f["message"] == "50% of training episodes that answered holding a tool result answered something else (hard stratum: 100%)"
    assert f["evidence"]["rows"][0] == "s0-g1-0"


def test_tool_results_mostly_used_or_not_reported_say_nothing(tmp_path, art):
    n = 48
    used = [str(i) if i % 8 else "0" for i in range(n)]  # 1 in 8 ignored: under the warning
    r = art.run_builtin("tool_use", art.ctx_for(tmp_path, rollouts_t=art.rollouts(tool_result=used, tool_calls=[1] * n)))
    assert r["metrics"]["behavior/tool_result_ignored_frac"] == pytest.approx(5 / 48)
    assert not [f for f in r["findings"] if f["id"] == "behavior.tool_result_ignored"]
    r = art.run_builtin("tool_use", art.ctx_for(tmp_path / "b", rollouts_t=art.rollouts(tool_calls=[1] * n)))
    assert not [k for k in r["metrics"] if "tool_result" in k]  # a domain that reports no result: no measure


def test_format_failures_coupled_to_truncation(tmp_path, art):
    fmt = [0, 0, 0, 0] + [1] * 6
    truncated = [True, True, True, False] + [False] * 6
    eval_t = art.eval_table({f"t{i}": [1] for i in range(10)}, reward__format=fmt, truncated=truncated)
    r = art.run_builtin("format_failure", art.ctx_for(tmp_path, eval_t=eval_t))
    m = r["metrics"]
    assert m["behavior/eval_format_fail_frac"] == 0.4
    assert m["behavior/eval_format_fail_truncated_frac"] == 0.75
    assert m["behavior/eval_format_fail_rate_truncated"] == 1.0
    assert m["behavior/eval_format_fail_rate_complete"] == pytest.approx(1 / 7)
    f = art.by_id(r, "behavior.format_truncation_coupling")
    assert f["evidence"]["rows"] == ["t0", "t1", "t2", "t3"]


def test_format_failures_not_coupled(tmp_path, art):
    eval_t = art.eval_table({f"t{i}": [1] for i in range(10)}, reward__format=[0, 0, 0] + [1] * 7)
    r = art.run_builtin("format_failure", art.ctx_for(tmp_path, eval_t=eval_t))
    assert art.ids(r) == {"behavior.format_failures"}
