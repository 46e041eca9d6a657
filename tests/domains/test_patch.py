"""The patch (long-horizon) domain: episodes scored through the real rollout driver, splits, options."""

from __future__ import annotations

import json

import pytest
from scripted import ScriptedPolicy

from evo.domains import get_environment
from evo.domains.patch import make_splits
from evo.domains.taskfiles import shipped_dir
from evo.errors import ConfigError


@pytest.fixture(scope="module")
def env():
    return get_environment("patch", {})


@pytest.fixture(scope="module")
def hard(env):
    return next(t for t in env.tasks("validation") if t.stratum == "hard")


def play(env, task, actions, kit, max_new_tokens=16, max_total_tokens=None):
    queue = list(actions)
    return kit.drive(env, [task], ScriptedPolicy(lambda ctx: queue.pop(0)), max_new_tokens=max_new_tokens,
                     max_total_tokens=max_total_tokens)[0]


def typo_lines(task):
    return [k + 1 for k, (a, b) in enumerate(zip(task.meta["lines"], task.answer)) if a != b]


def fixes(task):
    return [f"edit {k} {task.answer[k - 1]}\n" for k in typo_lines(task)]


def test_read_edit_test_submit_is_correct(env, hard, kit):
    t = play(env, hard, ["read\n", *fixes(hard), "test\n", "submit\n"], kit)
    assert t.components == {"correctness": 1.0, "partial_credit": 1.0, "format": 1.0,
                            "efficiency": pytest.approx(1 - 4 / 8), "edit_verify": 0.5, "exploration": 1.0}
    assert t.info["tools"] == ["read", "edit", "edit", "test", "submit"] and t.tool_calls == 5
    assert t.info["answer"] == "5/5" and t.info["extra"]["ended_by"] == "submit"
    assert "|1 " + hard.meta["lines"][0] + "\n|2 " in t.text and "|5/5 pass\n" in t.text
    assert t.finish_reason == "stop" and not t.truncated


def test_premature_submission_scores_the_tests_it_left_failing(env, hard, kit):
    t = play(env, hard, ["read\n", "submit\n"], kit)
    assert t.components["correctness"] == 0.0 and t.components["partial_credit"] == pytest.approx(3 / 5)
    assert t.info["extra"]["premature"] is True and t.info["answer"] == "3/5"


def test_wrong_edit_breaks_a_passing_test(env, hard, kit):
    good = next(k for k in range(1, 6) if k not in typo_lines(hard))
    t = play(env, hard, ["read\n", f"edit {good} zebra\n", "edit 9 cat\n", "test\n", "submit\n"], kit)
    assert t.components["correctness"] == 0.0 and t.components["partial_credit"] == pytest.approx(2 / 5)
    assert "|no line 9\n" in t.text and t.info["extra"]["errors"] == ["no_such_line"]
    assert "|2/5 pass\n" in t.text


def test_malformed_and_truncated_actions_are_idle(env, hard, kit):
    t = play(env, hard, ["edit line two to dog\n", "read please\n", "submit\n"], kit)
    assert t.info["extra"]["idle_turns"] == 2 and t.components["format"] == 0.0
    assert t.text.count("|? read, edit N WORD, test or submit\n") == 2
    assert t.components["partial_credit"] == pytest.approx(3 / 5)  # submitted untouched
    # An edit cut off by the generation limit is not half applied.
    cut = play(env, hard, ["read\n", fixes(hard)[0], "submit\n"], kit, max_new_tokens=7)
    assert cut.truncated and cut.info["extra"]["idle_turns"] == 1 and "|3/5" not in cut.text
    assert cut.components["partial_credit"] == pytest.approx(3 / 5)


def test_idle_streak_ends_the_episode(env, hard, kit):
    t = play(env, hard, ["hello\n", "?\n", "\n"], kit)
    assert t.turns == 3 and t.info["extra"]["ended_by"] == "idle" and t.info["extra"]["abandoned"] is True
    assert t.finish_reason == "stop" and t.components["correctness"] == 0.0 and t.info["answer"] == ""


def test_repetitive_loop_runs_to_the_turn_limit(env, hard, kit):
    t = play(env, hard, ["read\n"] * 8, kit)
    assert t.finish_reason == "max_turns" and t.turns == 8 and t.info["extra"]["repeats"] == 7
    assert t.info["extra"]["abandoned"] is True and t.components["efficiency"] == pytest.approx(1 / 8)
    assert t.components["correctness"] == 0.0 and t.components["partial_credit"] == 0.0


def test_episode_token_budget_truncates(env, hard, kit):
    t = play(env, hard, ["read\n"] * 8, kit, max_total_tokens=60)
    assert t.truncated and t.finish_reason == "max_total_tokens" and t.turns < 8


def test_behaviour_terms_follow_the_definitions(env, hard, kit):
    blind = play(env, hard, [*fixes(hard), "submit\n"], kit)
    assert blind.components["correctness"] == 1.0 and blind.components["exploration"] == 0.0
    assert blind.components["edit_verify"] == 0.0
    checked = play(env, hard, ["test\n", fixes(hard)[0], "test\n", fixes(hard)[1], "test\n", "submit\n"], kit)
    assert checked.components["exploration"] == 1.0 and checked.components["edit_verify"] == 1.0


def test_shipped_splits_are_the_seeded_generator_and_disjoint(env):
    generated = make_splits(0)
    for split in ("train", "validation"):
        shipped = [json.loads(line) for line in (shipped_dir("patch") / f"{split}.jsonl").read_text().splitlines()]
        assert shipped == generated[split]
    train = {tuple(r["lines"]) for r in generated["train"]}
    validation = [tuple(r["lines"]) for r in generated["validation"]]
    assert len(set(validation)) == len(validation) == 90 and not train & set(validation)
    for row in generated["validation"]:
        n_typos = sum(a != b for a, b in zip(row["lines"], row["fixed"]))
        assert (len(row["lines"]), n_typos) == {"easy": (3, 1), "medium": (5, 1), "hard": (5, 2)}[row["subset"]]


def test_bad_options_and_rows_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="domain.options.max_idle_turns"):
        get_environment("patch", {"max_idle_turns": -1})
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"issue": "x", "lines": ["cat"], "fixed": ["cat"]}\n')
    with pytest.raises(ConfigError, match="bad.jsonl:1: 'lines' equals 'fixed'"):
        get_environment("patch", {"train_file": str(bad)}).tasks("train")
