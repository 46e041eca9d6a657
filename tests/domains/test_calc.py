"""The calc (tool-use) domain: episodes scored through the real rollout driver, splits, options."""

from __future__ import annotations

import json

import pytest
from scripted import ScriptedPolicy

from evo.domains import get_environment
from evo.domains.calc import ExpressionError, evaluate_expression, make_splits
from evo.domains.taskfiles import shipped_dir
from evo.errors import ConfigError


@pytest.fixture(scope="module")
def env():
    return get_environment("calc", {})


@pytest.fixture(scope="module")
def hard(env):
    return next(t for t in env.tasks("validation") if t.stratum == "hard")


def play(env, task, actions, kit, max_new_tokens=16):
    """One episode of `actions` (one per turn) through the driver; the trajectory."""
    queue = list(actions)
    return kit.drive(env, [task], ScriptedPolicy(lambda ctx: queue.pop(0)), max_new_tokens=max_new_tokens)[0]


def test_tool_call_then_answer_is_correct(env, hard, kit):
    t = play(env, hard, [f"calc {hard.prompt}\n", f"answer {hard.answer}\n"], kit)
    assert t.components == {"correctness": 1.0, "partial_credit": 1.0, "format": 1.0, "tool_success": 1.0,
                            "efficiency": pytest.approx(2 / 3), "tool_grounding": 1.0}
    assert t.info["extra"]["tool_result"] == str(hard.answer)
    assert t.turns == 2 and t.tool_calls == 1 and t.info["tools"] == ["calc"]
    assert f"|= {hard.answer}\n" in t.text and t.info["answer"] == str(hard.answer)
    assert t.finish_reason == "stop" and not t.truncated


def test_direct_answer_scores_without_the_tool(env, hard, kit):
    t = play(env, hard, [f"answer {hard.answer}\n"], kit)
    assert t.components["correctness"] == 1.0 and t.components["efficiency"] == 1.0
    assert t.components["tool_success"] == 0.0 and t.tool_calls == 0


def test_wrong_answer_gets_digit_partial_credit(env, hard, kit):
    ref = str(hard.answer)
    wrong = ref[:-1] + str((int(ref[-1]) + 1) % 10)  # the last digit off
    t = play(env, hard, [f"answer {wrong}\n"], kit)
    assert t.components["correctness"] == 0.0
    assert t.components["partial_credit"] == pytest.approx((len(ref) - 1) / len(ref))
    assert t.components["format"] == 1.0
    far = play(env, hard, ["answer 7\n"], kit)
    assert far.components["partial_credit"] < t.components["partial_credit"]


def test_tool_grounding_pays_for_carrying_the_last_result_not_for_being_right(env, hard, kit):
    """calc 299*32 -> |= 9568 -> answer 9576 is the failure the term is for: handed the value, answered another."""
    ignored = play(env, hard, [f"calc {hard.prompt}\n", f"answer {hard.answer + 8}\n"], kit)
    assert ignored.components["tool_grounding"] == 0.0 and ignored.components["correctness"] == 0.0
    assert ignored.info["extra"]["tool_result"] == str(hard.answer) and ignored.info["answer"] == str(hard.answer + 8)
    wrong_call = play(env, hard, ["calc 2+2\n", "answer 4\n"], kit)  # faithful to a wrong call: grounded, not correct
    assert wrong_call.components["tool_grounding"] == 1.0 and wrong_call.components["correctness"] == 0.0
    last = play(env, hard, ["calc 2+2\n", "calc 3+3\n", "answer 4\n"], kit)  # the last result counts
    assert last.components["tool_grounding"] == 0.0 and last.info["extra"]["tool_result"] == "6"
    failed_after = play(env, hard, ["calc 2+2\n", "calc 2+\n", "answer 4\n"], kit)  # a failed call returns no value
    assert failed_after.components["tool_grounding"] == 1.0 and failed_after.info["extra"]["tool_result"] == "4"
    head = play(env, hard, [f"answer {hard.answer}\n"], kit)  # no call: nothing to carry
    assert head.components["tool_grounding"] == 0.0 and "tool_result" not in head.info.get("extra", {})
    off = play(get_environment("calc", {"tool": False}), hard, [f"calc {hard.prompt}\n", f"answer {hard.answer}\n"], kit)
    assert off.components["tool_grounding"] == 0.0 and "tool_result" not in off.info["extra"]


def test_malformed_answer_ends_the_episode_with_nothing(env, hard, kit):
    t = play(env, hard, ["answer about forty\n"], kit, max_new_tokens=32)
    assert t.turns == 1 and t.info["answer"] == ""
    assert t.components["correctness"] == t.components["format"] == t.components["partial_credit"] == 0.0


def test_truncated_action_is_not_an_answer(env, hard, kit):
    # The generation limit cuts the answer before its newline: the turn is idle, not a (wrong) answer.
    t = play(env, hard, [f"answer {hard.answer}\n"] * 3, kit, max_new_tokens=8)
    assert t.truncated and t.finish_reason == "max_turns" and t.turns == 3
    assert t.components["correctness"] == 0.0 and t.components["format"] == 0.0
    assert t.info["extra"]["idle_turns"] == 3


def test_tool_misuse_is_recorded_and_costs_tool_success(env, hard, kit):
    t = play(env, hard, ["calc 3+*\n", f"calc {hard.prompt}\n", f"answer {hard.answer}\n"], kit)
    assert t.components["correctness"] == 1.0 and t.components["tool_success"] == 0.0
    assert t.info["tools"] == ["calc", "calc"] and t.info["extra"]["errors"] == ["tool_error"]
    assert "|error:" in t.text
    off = get_environment("calc", {"tool": False})
    assert "Tools: none" in off.render_prompt(hard)
    t = play(off, hard, [f"calc {hard.prompt}\n", f"answer {hard.answer}\n"], kit)
    assert "|calc is not available\n" in t.text and t.info["extra"]["errors"] == ["tool_unavailable"]
    assert t.info["tools"] == ["calc"] and t.components["tool_success"] == 0.0  # the attempt is still visible


def test_idle_turns_run_out_at_the_turn_limit(env, hard, kit):
    t = play(env, hard, ["let me think\n", "hmm\n", "\n"], kit)
    assert t.finish_reason == "max_turns" and t.turns == 3 and not t.truncated
    assert t.info["extra"]["idle_turns"] == 3 and t.info["extra"]["ended_by"] == "max_turns"
    assert t.text.count("|? calc EXPR or answer N\n") == 3
    assert t.components == {"correctness": 0.0, "partial_credit": 0.0, "format": 0.0, "tool_success": 0.0,
                            "efficiency": pytest.approx(1 / 3), "tool_grounding": 0.0}


def test_repeated_tool_calls_are_counted(env, hard, kit):
    call = f"calc {hard.prompt}\n"
    t = play(env, hard, [call, call, call], kit)
    assert t.info["extra"]["repeats"] == 2 and t.finish_reason == "max_turns"
    assert t.components["correctness"] == 0.0 and t.components["tool_success"] == 1.0


def test_calculator_evaluates_and_refuses():
    assert evaluate_expression("347*28") == 9716
    assert evaluate_expression("2+3*(4-6)") == -4
    assert evaluate_expression(" -5 * 3 ") == -15
    for bad in ("", "3+", "2**8", "import os", "(1+2", "9" * 10, "1e5"):
        with pytest.raises(ExpressionError):
            evaluate_expression(bad)
    with pytest.raises(ExpressionError):
        evaluate_expression("*".join(["999999999"] * 3))  # no unbounded arithmetic on the policy's behalf


def test_shipped_splits_are_the_seeded_generator_and_disjoint(env):
    generated = make_splits(0)
    for split in ("train", "validation"):
        shipped = [json.loads(line) for line in (shipped_dir("calc") / f"{split}.jsonl").read_text().splitlines()]
        assert shipped == generated[split]
    train = {r["expr"] for r in generated["train"]}
    validation = [r["expr"] for r in generated["validation"]]
    assert len(set(validation)) == len(validation) == 90 and not train & set(validation)
    assert {t.stratum for t in env.tasks("validation")} == {"easy", "medium", "hard"}


def test_bad_options_and_rows_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="domain.options.max_turns"):
        get_environment("calc", {"max_turns": 0})
    with pytest.raises(ConfigError, match="domain.options.tool"):
        get_environment("calc", {"tool": "yes"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"expr": "2+2", "answer": 5}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:1: 'answer' 5 is not the value of '2\+2'"):
        get_environment("calc", {"validation_file": str(bad)}).tasks("validation")


def test_eval_records_keep_the_domains_idle_turn_count(tmp_path):
    """eval.parquet's `idle_turns` is the episode's own count: a tool call then an answer has none, a
    nonsense turn before them one (turns - tool_calls would say 1 and 2)."""
    from pathlib import Path

    import pyarrow.parquet as pq

    from evo.recipe import load_recipe
    from evo.train.evaluate import evaluate

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "calc-tiny.yaml")
    recipe["eval"]["max_tasks"] = 6

    def respond(context: str) -> str:
        expr = context.split("Q: ", 1)[1].split("\n", 1)[0]
        if "|= " in context:
            return "answer " + context.rsplit("|= ", 1)[1].split("\n", 1)[0] + "\n"
        if expr[0] in "13579" and "|?" not in context:
            return "@@\n"
        return f"calc {expr}\n"

    evaluate(ScriptedPolicy(respond), recipe, tmp_path, k=1)
    rows = pq.read_table(tmp_path / "eval.parquet").to_pylist()
    assert {row["idle_turns"] for row in rows} == {0, 1}
    for row in rows:
        assert row["tool_result"] == row["answer"] and row["reward/tool_grounding"] == 1.0
        assert row["idle_turns"] == (1 if row["completion"].startswith("@@") else 0)
        assert row["tool_calls"] == 1 and row["turns"] == 2 + row["idle_turns"] and row["score"] == 1.0
