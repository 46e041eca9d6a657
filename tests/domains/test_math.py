"""The math domain: documented scores for correct, wrong, malformed and truncated answers,
and the code-interpreter tool through the real rollout driver."""

from __future__ import annotations

import json

import pytest
from scripted import ScriptedPolicy

from evo.domains import get_environment
from evo.domains.base import Task
from evo.errors import ConfigError

HALF = Task(id="half", prompt="What is 1/2 + 1/4?", answer="\\frac{3}{4}", stratum="arithmetic")


@pytest.fixture(scope="module")
def env():
    return get_environment("math", {})


def test_sample_tasks_load_with_strata(env):
    tasks = env.tasks("validation")
    assert len(tasks) == 20 and {t.stratum for t in tasks} >= {"algebra", "arithmetic", "number_theory"}
    assert "\\boxed{}" in env.render_prompt(tasks[0])
    assert env.max_turns == 1 and env.reward_components == ("correctness", "partial_credit", "format", "length", "judge_if")


def test_correct_answer(env, kit):
    c, info = kit.score_one(env, HALF, "1/2 + 1/4 = 3/4, so \\boxed{0.75}")
    assert c == {"correctness": 1.0, "partial_credit": 1.0, "format": 1.0, "length": 1.0, "judge_if": 1.0}
    assert info["answer"] == "0.75"


def test_wrong_answer_gets_graded_partial_credit(env, kit):
    c, info = kit.score_one(env, HALF, "\\boxed{0.6}")
    assert c["correctness"] == 0.0 and c["format"] == 1.0
    assert c["partial_credit"] == pytest.approx(1 - 0.15 / 1)  # |p - r| / max(|r|, 1)


def test_malformed_answer_fails_the_format_gate(env, kit):
    boxed_only = get_environment("math", {"extract": "boxed"})
    c, info = kit.score_one(boxed_only, HALF, "the answer is 3/4")
    assert (c["correctness"], c["format"], info["answer"], info["error"]) == (0.0, 0.0, "", "no_answer")
    c, info = kit.score_one(env, HALF, "the answer is 3/4")  # auto falls back to the last number
    assert (c["correctness"], c["format"], info["answer"]) == (1.0, 1.0, "3/4")
    c, _ = kit.score_one(env, HALF, "maybe \\boxed{1} or \\boxed{3/4}")  # hedging: judge_if notices
    assert c["correctness"] == 1.0 and c["judge_if"] == 0.75


def test_truncated_answer_scores_zero(env, kit):
    for cut in ("<think>1/2 + 1/4 is 3/4 because", "so the answer is \\boxed{3/"):
        c, info = kit.score_one(env, HALF, cut)
        assert (c["correctness"], c["partial_credit"], c["format"]) == (0.0, 0.0, 0.0), cut
        assert info["answer"] == ""


def test_truncation_by_the_token_limit_is_recorded(env, kit):
    policy = ScriptedPolicy(["Let me think step by step. " * 10 + "\\boxed{3/4}"])
    (traj,) = kit.drive(env, [HALF], policy, max_new_tokens=40)
    assert traj.truncated and traj.finish_reason == "length"
    assert traj.components["correctness"] == 0.0 and len(traj.response_ids) == 40


def test_length_component_prefers_short_answers():
    short = get_environment("math", {"length_budget": 40})
    long_text = "x" * 20 + "\\boxed{3/4}"  # 31 characters: past half the budget
    episode = short.reset(HALF)
    assert episode.step(long_text).components["length"] == pytest.approx(1 - (len(long_text) - 20) / 20)


def test_options_are_validated():
    with pytest.raises(ConfigError, match="domain.options.extract: 'first' is not one of"):
        get_environment("math", {"extract": "first"})
    with pytest.raises(ConfigError, match="does not exist"):
        get_environment("math", {"train_file": "nope.jsonl"})
    with pytest.raises(ConfigError, match="domain.options.bogus: not an option of the math domain; use one of train_file"):
        get_environment("math", {"bogus": 1})


def test_user_task_file_with_subsets(tmp_path):
    f = tmp_path / "aime.jsonl"
    f.write_text(json.dumps({"problem": "1+1?", "answer": "2", "subset": "aime24"}) + "\n"
                 + json.dumps({"id": "q2", "problem": "2+2?", "answer": "4", "subset": "aime25"}) + "\n")
    env = get_environment("math", {"files": {"aime": str(f)}})
    tasks = env.tasks("aime")
    assert [(t.id, t.stratum, t.answer) for t in tasks] == [("aime-00000", "aime24", "2"), ("q2", "aime25", "4")]
    # `files` may name the train split too; it replaces the shipped sample
    assert [t.id for t in get_environment("math", {"files": {"train": str(f)}}).tasks("train")] == ["train-00000", "q2"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "x"}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:1: missing key 'answer'"):
        get_environment("math", {"validation_file": str(bad)}).tasks("validation")


# ---- the code-interpreter tool ------------------------------------------------------------------

@pytest.fixture(scope="module")
def tool_env():
    return get_environment("math", {"code_interpreter": True, "max_turns": 3,
                                    "sandbox": {"cpu_seconds": 1, "wall_seconds": 3}})


def test_code_interpreter_runs_code_and_returns_the_output(tool_env, kit):
    policy = ScriptedPolicy([
        "Compute it.\n```python\nfrom fractions import Fraction\nprint(Fraction(1, 2) + Fraction(1, 4))\n```\n```output",
        "The tool says 3/4, so \\boxed{\\frac{3}{4}}",
    ])
    (traj,) = kit.drive(tool_env, [HALF], policy)
    assert traj.turns == 2 and traj.tool_calls == 1 and traj.info["tools"] == ["python"]
    assert "```output\n3/4\n```" in traj.text
    assert traj.components["correctness"] == 1.0
    assert "3/4" in policy.prompts[1]  # the second turn saw the tool output
    roles = [t["role"] for t in traj.info["transcript"]]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_tool_errors_come_back_as_observations(tool_env, kit):
    policy = ScriptedPolicy(["<tool>python\nprint(1/0)\n</tool>", "\\boxed{3/4}"])
    (traj,) = kit.drive(tool_env, [HALF], policy)
    assert "ZeroDivisionError" in traj.text and traj.tool_calls == 1
    policy = ScriptedPolicy(["```python\nimport socket\nsocket.socket()\n```", "\\boxed{1}"])
    (traj,) = kit.drive(tool_env, [HALF], policy)
    assert traj.info["extra"]["errors"] == ["network_blocked"] and traj.components["correctness"] == 0.0


def test_tool_use_without_an_answer_ends_at_max_turns(tool_env, kit):
    policy = ScriptedPolicy(["```python\nprint(1)\n```"], cycle=True)
    (traj,) = kit.drive(tool_env, [HALF], policy)
    assert traj.finish_reason == "max_turns" and traj.turns == 3
    assert traj.tool_calls == 2  # the last allowed turn is scored, not run
    assert traj.components["correctness"] == 0.0 and traj.components["format"] == 0.0


def test_without_the_tool_code_is_just_text(env, kit):
    c, info = kit.score_one(env, HALF, "```python\nprint(3/4)\n```")
    assert "tool" not in info and info["answer"] == "3/4"  # auto mode read the last number; nothing ran


def test_legitimate_tool_use_is_not_vetoed_as_a_leak(tmp_path):
    from evo.harness.context import AnalyzerContext, RunArtifacts
    from evo.harness.loader import AnalyzerFile, run_analyzer
    from evo.recipe import load_recipe, set_path
    from evo.resources import resource_dir
    from evo.train.evaluate import evaluate

    data = tmp_path / "sum.jsonl"
    data.write_text(json.dumps({"problem": "What is 1000 + 234?", "answer": "1234"}) + "\n")
    recipe = load_recipe(resource_dir("recipes") / "math-tiny.yaml")
    recipe = set_path(recipe, "domain.options", {"code_interpreter": True, "validation_file": str(data)})
    recipe = set_path(set_path(recipe, "rollout.max_new_tokens", 400), "eval.k", 1)
    policy = ScriptedPolicy(["```python\nprint(1000 + 234)\n```", "The sum is \\boxed{1234}."])
    assert evaluate(policy, recipe, tmp_path / "run")["avg_at_k"] == 1.0
    audit = resource_dir("analyzers") / "audit_leakage.py"
    result = run_analyzer(AnalyzerFile("audit_leakage", audit), AnalyzerContext(run=RunArtifacts(tmp_path / "run"), recipe=recipe))
    assert result.status == "ok" and result.vetoes == []
