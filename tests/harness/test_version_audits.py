"""Version-layer comparisons and the three audits: planted problems are vetoed, healthy versions pass."""

import json

import numpy as np
import pytest

from evo.harness.diagnose import diagnose

SWE = {"domain": {"name": "swe", "options": {"max_turns": 10}}}


def test_version_compare_against_parent_and_promoted(tmp_path, art):
    tasks = [f"t{i}" for i in range(20)]
    strata = {t: ("a" if i < 10 else "b") for i, t in enumerate(tasks)}
    parent = art.write_run(tmp_path / "parent", eval_t=art.eval_table({t: [1, 1, 0, 0] for t in tasks}, strata))
    promoted = art.write_run(tmp_path / "promoted", eval_t=art.eval_table({t: [1, 1, 1, 0] for t in tasks}, strata))
    child_eval = art.eval_table({t: [0, 0, 0, 1] for t in tasks}, strata)
    ctx = art.ctx_for(tmp_path, eval_t=child_eval, parent=parent, promoted=promoted, settings={"search": {"bootstrap_samples": 500}})
    r = art.run_builtin("version_compare", ctx)
    m = r["metrics"]
    assert m["version/delta_vs_parent"] == pytest.approx(-0.25)
    assert m["version/ci_high_vs_parent"] == pytest.approx(-0.25)  # every task moved by exactly -0.25
    assert m["version/delta_vs_parent/a"] == pytest.approx(-0.25) and m["version/n_tasks_vs_parent"] == 20
    assert m["version/delta_vs_promoted"] == pytest.approx(-0.5)
    assert m["version/p_value_vs_parent"] < 0.001
    assert art.by_id(r, "version.regression_vs_parent")["evidence"]["rows"] == sorted(tasks)
    assert "version.below_promoted" in art.ids(r)


def test_turn_inflation_with_rising_score_is_flagged(tmp_path, art):
    tasks = {f"t{i}": [1, 0] for i in range(10)}
    parent = art.write_run(tmp_path / "parent", eval_t=art.eval_table(tasks, turns=[36] * 20))
    child = art.eval_table({f"t{i}": [1, 1] for i in range(10)}, turns=[76] * 20)
    r = art.run_builtin("version_compare", art.ctx_for(tmp_path, eval_t=child, parent=parent, recipe=SWE))
    assert r["metrics"]["version/turns_ratio_vs_parent"] == pytest.approx(76 / 36)
    assert "36.0 -> 76.0" in art.by_id(r, "version.turn_inflation")["message"]
    assert "version.improvement_vs_parent" in art.ids(r)


# ---------------------------------------------------------------- leakage

def test_leakage_vetoes_git_history_reads_in_swe(tmp_path, art):
    completions = ["edit file; run tests"] * 48
    completions[5] = "$ git log -p src/app.py"
    transcripts = [""] * 48
    transcripts[9] = json.dumps([{"role": "user", "content": "fix"}, {"role": "assistant", "content": "cat .git/ORIG_HEAD"}])
    table = art.rollouts(completion=completions, transcript=transcripts)
    r = art.run_builtin("audit_leakage", art.ctx_for(tmp_path, rollouts_t=table, recipe=SWE))
    assert r["audit"] is True
    assert len(r["vetoes"]) == 1
    veto = r["vetoes"][0]
    assert veto["audit"] == "leakage" and veto["evidence"]["rows"] == ["s0-g1-1", "s0-g2-1"]
    assert art.by_id(r, "behavior.leakage")["severity"] == "critical"


def test_leakage_signatures_are_per_domain_and_configurable(tmp_path, art):
    completions = ["print(1)"] * 48
    completions[0] = "$ git log"
    table = art.rollouts(completion=completions)
    math = {"domain": {"name": "math"}}
    assert art.run_builtin("audit_leakage", art.ctx_for(tmp_path, "a", rollouts_t=table, recipe=math))["vetoes"] == []
    settings = {"audits": {"leakage_signatures": [r"print\(1\)"]}}
    eval_t = art.eval_table({"t0": [1], "t1": [1]}, completion=["print(1)", "2"])
    r = art.run_builtin("audit_leakage", art.ctx_for(tmp_path, "b", eval_t=eval_t, recipe=math, settings=settings))
    assert [v["evidence"]["rows"] for v in r["vetoes"]] == [["t0"]]
    assert r["metrics"]["behavior/eval_leak_signature_hits"] == 1


def test_leakage_answer_from_the_environment(tmp_path, art):
    leak = json.dumps([{"role": "user", "content": "solve"}, {"role": "assistant", "content": "run tool"},
                       {"role": "tool", "content": "expected output: 314159"}, {"role": "assistant", "content": "314159"}])
    honest = json.dumps([{"role": "user", "content": "solve"}, {"role": "assistant", "content": "I get 314159"},
                         {"role": "tool", "content": "you said 314159"}])
    transcripts = [honest] * 48
    transcripts[2] = leak
    rewards = np.tile([1.0, 0.0], 24)
    table = art.rollouts(rewards=rewards, transcript=transcripts, answer=["314159"] * 48)
    r = art.run_builtin("audit_leakage", art.ctx_for(tmp_path, rollouts_t=table))
    assert r["metrics"]["behavior/answer_leak_count"] == 1
    assert r["vetoes"][0]["evidence"]["rows"] == ["s0-g0-2"]
    assert "got the answer from the environment" in r["vetoes"][0]["message"]


def test_invalid_leakage_signature_fails_the_audit_with_a_clear_error(tmp_path, art):
    run = art.write_run(tmp_path / "run", rollouts_t=art.rollouts())
    diag = diagnose(run, recipe={}, settings={"audits": {"leakage_signatures": ["(unclosed"]}})
    assert diag["audits"]["failed"] == ["leakage"]
    err = [f for f in diag["findings"] if f["id"] == "harness.analyzer_error"][0]
    assert "'(unclosed' is not a valid RE2 regex" in err["message"]


# ---------------------------------------------------------------- tampering

@pytest.mark.parametrize("paths,declared,vetoed", [
    (["recipe.yaml", "analyzers/truncation.py"], False, False),
    (["data/validation/tasks.jsonl"], False, True),
    (["evaluator/score.py"], True, True),
    (["analyzers/audit_leakage.py"], False, True),
    (["analyzers/audit_leakage.py"], True, False),
    (["analyzers/audit_leakage.py", "data/validation/x.json"], True, True),
    (["evo.yaml"], True, True),
    ([".github/workflows/evo-gate.yml"], False, True),
])
def test_tampering_with_protected_paths(tmp_path, art, paths, declared, vetoed):
    ctx = art.ctx_for(tmp_path, eval_t=art.eval_table({"t": [1]}), changed_paths=paths, declared_harness_revision=declared)
    r = art.run_builtin("audit_tampering", ctx)
    assert bool(r["vetoes"]) is vetoed
    if vetoed:
        protected = [p for p in paths if not p.startswith(("recipe", "analyzers/truncation"))]
        assert r["vetoes"][0]["evidence"]["paths"] == sorted(protected)
        assert art.by_id(r, "version.tampering")["evidence"]["rows"] == sorted(protected)


def test_tampering_uses_configured_protected_globs(tmp_path, art):
    settings = {"paths": {"protected": ["secret/**"]}}
    ctx = art.ctx_for(tmp_path, changed_paths=["secret/a/b.txt", "evo.yaml"], settings=settings)
    r = art.run_builtin("audit_tampering", ctx)
    assert r["vetoes"][0]["evidence"]["paths"] == ["secret/a/b.txt"]


# ---------------------------------------------------------------- collapse

def test_collapse_one_turn_degeneration_in_multi_turn_domain(tmp_path, art):
    r = art.run_builtin("audit_collapse", art.ctx_for(tmp_path, rollouts_t=art.rollouts(turns=[1] * 48), recipe=SWE))
    assert [v["evidence"]["kind"] for v in r["vetoes"]] == ["one_turn"]
    single_turn_domain = art.run_builtin("audit_collapse", art.ctx_for(tmp_path, "b", rollouts_t=art.rollouts(turns=[1] * 48)))
    assert single_turn_domain["vetoes"] == []


def test_one_turn_is_no_collapse_under_a_one_turn_limit(tmp_path, art):
    """A parent cut off by `max_turns: 1` reads as multi-turn; its child under the same limit takes one turn by recipe."""
    calc_one_turn = {"domain": {"name": "calc", "options": {"tool": True, "max_turns": 1}}}
    cut_off = art.rollouts(turns=[1] * 48, tool_calls=[1] * 12 + [0] * 36, finish_reason=["max_turns"] * 12 + ["stop"] * 36)
    parent = art.write_run(tmp_path / "parent", rollouts_t=cut_off)
    child = art.rollouts(turns=[1] * 48, tool_calls=[0] * 48, finish_reason=["stop"] * 48)
    same_limit = art.run_builtin("audit_collapse", art.ctx_for(tmp_path, rollouts_t=child, recipe=calc_one_turn, parent=parent))
    assert same_limit["vetoes"] == []
    calc_two_turns = {"domain": {"name": "calc", "options": {"tool": True, "max_turns": 2}}}
    raised = art.run_builtin("audit_collapse", art.ctx_for(tmp_path, "b", rollouts_t=child, recipe=calc_two_turns, parent=parent))
    assert [v["evidence"]["kind"] for v in raised["vetoes"]] == ["one_turn"]


def test_a_turn_limit_the_recipe_leaves_to_the_domain_still_makes_it_multi_turn(tmp_path, art):
    """calc without `max_turns` runs its default three turns: a run whose every episode took one is a collapse."""
    run = art.write_run(tmp_path / "run", rollouts_t=art.rollouts(turns=[1] * 48))
    vetoes = diagnose(run, recipe={"domain": {"name": "calc", "options": {"tool": True}}})["audits"]["vetoes"]
    assert "one_turn" in [v["evidence"]["kind"] for v in vetoes]
    one_turn = diagnose(run, recipe={"domain": {"name": "calc", "options": {"tool": True, "max_turns": 1}}},
                        out_dir=tmp_path / "one")
    assert "one_turn" not in [v["evidence"]["kind"] for v in one_turn["audits"]["vetoes"]]


def test_collapse_runaway_turns(tmp_path, art):
    table = art.rollouts(turns=[10] * 48, finish_reason=["max_turns"] * 48, tool_calls=[9] * 48)
    r = art.run_builtin("audit_collapse", art.ctx_for(tmp_path, rollouts_t=table, recipe=SWE))
    assert [v["evidence"]["kind"] for v in r["vetoes"]] == ["runaway_turns"]
    assert r["vetoes"][0]["evidence"]["rows"][0] == "s2-g0-0"


def test_collapse_entropy(tmp_path, art):
    metrics = [{"step": i, "policy/entropy": e} for i, e in enumerate([1.0, 1.0, 0.5, 0.3, 0.01, 0.01])]
    r = art.run_builtin("audit_collapse", art.ctx_for(tmp_path, rollouts_t=art.rollouts(), metrics=metrics))
    assert [v["evidence"]["kind"] for v in r["vetoes"]] == ["entropy"]


def test_collapse_near_total_dead_groups(tmp_path, art):
    rewards = np.zeros(3 * 8 * 4)
    rewards[:4] = [1, 0, 1, 0]  # only one live group, in the first step
    r = art.run_builtin("audit_collapse", art.ctx_for(tmp_path, rollouts_t=art.rollouts(n_groups=8, rewards=rewards)))
    assert [v["evidence"]["kind"] for v in r["vetoes"]] == ["dead_groups"]
    few = art.run_builtin("audit_collapse", art.ctx_for(tmp_path, "few", rollouts_t=art.rollouts(n_groups=4, rewards=np.zeros(48))))
    assert few["vetoes"] == []  # fewer than MIN_GROUPS recent groups is not evidence of collapse


def test_healthy_version_passes_every_audit(tmp_path, art):
    tools = [["bash", "edit", "run_tests", "submit"] for _ in range(48)]
    table = art.rollouts(turns=[6] * 48, tool_calls=[4] * 48, tools=tools)
    parent = art.write_run(tmp_path / "parent", eval_t=art.eval_table({f"t{i}": [1, 0] for i in range(10)}))
    run = art.write_run(tmp_path / "run", rollouts_t=table, eval_t=art.eval_table({f"t{i}": [1, 1] for i in range(10)}, turns=[6] * 20),
                        metrics=[{"step": i, "policy/entropy": 1.0} for i in range(6)])
    diag = diagnose(run, recipe=SWE, parent_run_dir=parent, changed_paths=["recipe.yaml"])
    assert diag["audits"] == {"vetoed": False, "vetoes": [], "ran": ["collapse", "leakage", "tampering"], "failed": []}
    assert diag["counts"]["critical"] == 0


def test_planted_leak_vetoes_the_diagnosis(tmp_path, art):
    completions = ["work"] * 48
    completions[40] = "git show HEAD~3:src/fix.py"
    table = art.rollouts(completion=completions, turns=[5] * 48, tool_calls=[4] * 48)
    run = art.write_run(tmp_path / "run", rollouts_t=table, eval_t=art.eval_table({"t": [1]}, turns=[5]))
    diag = diagnose(run, recipe=SWE, changed_paths=["recipe.yaml"])
    assert diag["audits"]["vetoed"] is True
    assert [(v["audit"], v["evidence"]["rows"]) for v in diag["audits"]["vetoes"]] == [("leakage", ["s2-g2-0"])]
    assert "VETOED by leakage" in (run / "diagnosis.md").read_text()


def test_planted_protected_path_edit_vetoes_the_diagnosis(tmp_path, art):
    run = art.write_run(tmp_path / "run", rollouts_t=art.rollouts(), eval_t=art.eval_table({"t": [1]}))
    diag = diagnose(run, recipe={}, changed_paths=["recipe.yaml", "data/validation/test.jsonl"])
    assert [v["audit"] for v in diag["audits"]["vetoes"]] == ["tampering"]
    assert diag["audits"]["vetoes"][0]["evidence"]["paths"] == ["data/validation/test.jsonl"]


def test_a_calculator_result_is_the_policys_computation_in_calc_not_a_leak(tmp_path, art):
    """calc: `calc 938*39` then `|= 36582` then `answer 36582` is the tool the task is about. The same transcript
    in another domain, or an answer shown by an observation the policy did not ask to compute, is a leak."""
    def transcript(action):
        return json.dumps([{"role": "user", "content": "Q: 938*39\nTools: calc\n"}, {"role": "assistant", "content": action},
                           {"role": "user", "content": "|= 36582\n"}, {"role": "assistant", "content": "answer 36582\n"}])

    calc = {"domain": {"name": "calc", "options": {"max_turns": 3}}}
    rewards = np.tile([1.0, 0.0], 24)
    called = art.rollouts(rewards=rewards, transcript=[transcript("calc 938*39\n")] * 48, answer=["36582"] * 48)
    r = art.run_builtin("audit_leakage", art.ctx_for(tmp_path, "a", rollouts_t=called, recipe=calc))
    assert r["vetoes"] == [] and r["metrics"]["behavior/answer_leak_count"] == 0
    r = art.run_builtin("audit_leakage", art.ctx_for(tmp_path, "b", rollouts_t=called, recipe=SWE))
    assert r["metrics"]["behavior/answer_leak_count"] == 24  # no calculator there: the environment said it
    unasked = art.rollouts(rewards=rewards, transcript=[transcript("hmm\n")] * 48, answer=["36582"] * 48)
    r = art.run_builtin("audit_leakage", art.ctx_for(tmp_path, "c", rollouts_t=unasked, recipe=calc))
    assert r["metrics"]["behavior/answer_leak_count"] == 24 and r["vetoes"]
