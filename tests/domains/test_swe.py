"""The toy SWE domain through the real multi-turn rollout driver, with scripted agents."""

from __future__ import annotations

import json

import pytest
from scripted import ScriptedPolicy, swe_history_leak_policy, swe_honest_policy

from evo.domains import get_environment

FIXED_CLAMP = "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n    return x\n"
CLAMP_PATCH = ("--- a/util.py\n+++ b/util.py\n@@ -4,3 +4,3 @@\n     if x > hi:\n-        return lo\n+        return hi\n"
               "     return x\n")


@pytest.fixture(scope="module")
def hidden():
    return get_environment("swe", {"max_turns": 6})


@pytest.fixture(scope="module")
def exposed():
    # What these tests check is the history leak, not the limits: a wall limit that a loaded machine cannot
    # make a test run time out under (the CPU-seconds limit, which load does not inflate, stays).
    return get_environment("swe", {"max_turns": 6, "expose_git_history": True, "sandbox": {"wall_seconds": 120.0}})


def clamp_task(env):
    return next(t for t in env.tasks("validation") if t.id == "swe-clamp-bounds")


def run(env, task, responses, kit, **kw):
    policy = ScriptedPolicy(responses)
    (traj,) = kit.drive(env, [task], policy, **kw)
    return traj, policy


def test_honest_agent_fixes_every_sample_bug(hidden, kit):
    tasks = hidden.tasks("validation")
    policy = ScriptedPolicy(swe_honest_policy({t.id: t.answer for t in tasks}))
    trajs = kit.drive(hidden, tasks, policy)
    for traj in trajs:
        assert traj.info["tools"] == ["read", "edit", "run_tests", "submit"]
        assert traj.components == {"correctness": 1.0, "partial_credit": 1.0, "format": 1.0,
                                   "efficiency": pytest.approx(1 - 3 / 6), "edit_verify": 1.0, "exploration": 1.0}
        assert traj.finish_reason == "eos" and traj.turns == 4 and traj.tool_calls == 4
        assert traj.info["extra"]["ended_by"] == "submit" and traj.info["extra"]["abandoned"] is False
        assert "\nObservation:\n0 passed" not in traj.text and "passed, 0 failed" in traj.text


def test_submitting_the_bug_earns_partial_credit_only(hidden, kit):
    traj, _ = run(hidden, clamp_task(hidden), ["submit"], kit)
    assert traj.components["correctness"] == 0.0
    assert traj.components["partial_credit"] == pytest.approx(2 / 3)  # test_above fails
    assert traj.info["extra"]["test_results"]["test_util.py::test_above"] is False
    assert traj.components["exploration"] == 0.0 and traj.components["edit_verify"] == 0.0


def test_patch_edits_apply(hidden, kit):
    traj, policy = run(hidden, clamp_task(hidden), [f"edit util.py\n```diff\n{CLAMP_PATCH}```", "run_tests", "submit"], kit)
    assert "Patch applied." in traj.text and "3 passed, 0 failed" in traj.text
    assert traj.components["correctness"] == 1.0 and traj.components["exploration"] == 0.0


def test_editing_the_tests_does_not_count(hidden, kit):
    cheat = "edit test_util.py\n```python\ndef test_above():\n    assert True\n```"
    traj, _ = run(hidden, clamp_task(hidden), [cheat, "run_tests", "submit"], kit)
    assert "1 passed, 0 failed" in traj.text  # the agent's own view of its edited tests
    assert traj.components["correctness"] == 0.0 and traj.components["partial_credit"] == pytest.approx(2 / 3)
    assert traj.info["extra"]["edited_tests"] is True


def test_idle_turns_end_the_episode(hidden, kit):
    traj, _ = run(hidden, clamp_task(hidden), ["I am not sure what to do.", "hmm", "still thinking"], kit)
    extra = traj.info["extra"]
    assert extra["ended_by"] == "idle" and extra["idle_turns"] == 3 and extra["abandoned"] is True
    assert traj.turns == 3 and traj.tool_calls == 0
    assert traj.components["format"] == 0.0 and traj.components["correctness"] == 0.0


def test_running_out_of_turns_is_abandonment(hidden, kit):
    traj, _ = run(hidden, clamp_task(hidden), ["read util.py"] * 6, kit)
    assert traj.finish_reason == "max_turns" and traj.turns == 6
    assert traj.info["extra"]["ended_by"] == "max_turns" and traj.info["extra"]["abandoned"] is True
    assert traj.components["correctness"] == 0.0 and traj.components["partial_credit"] == 0.0
    assert traj.components["efficiency"] == pytest.approx(1 - 5 / 6)


def test_turn_and_token_limits_of_the_driver(hidden, kit):
    traj, _ = run(hidden, clamp_task(hidden), ["read util.py"] * 6, kit, max_total_tokens=150)
    assert traj.truncated and traj.finish_reason == "max_total_tokens" and traj.turns < 6


def test_paths_and_commands_outside_the_repository_are_refused(kit):
    env = get_environment("swe", {"max_turns": 8})
    actions = ["read ../../etc/passwd", "shell cat /etc/passwd", "shell rm -rf .", "shell ls -a",
               "shell grep -n return util.py", "shell python -m pytest", "submit"]
    traj, _ = run(env, clamp_task(env), actions, kit)
    assert "root:" not in traj.text
    assert traj.info["tools"] == ["shell:cat", "shell:rm", "shell:ls", "shell:grep", "shell:python", "submit"]
    assert "rm: not allowed" in traj.text and ".git" not in traj.text  # no history folder when hidden
    assert "5:        return lo" in traj.text and "2 passed, 1 failed" in traj.text
    assert traj.info["extra"]["idle_turns"] == 1 and "command_refused" in traj.info["extra"]["errors"]


def test_hostile_code_in_the_repository_is_contained(hidden, kit):
    before = kit.machine_state()
    bomb = "edit util.py\n```python\nimport os\nwhile True:\n    os.fork()\n```"
    traj, _ = run(hidden, clamp_task(hidden), [bomb, "run_tests", "submit"], kit)
    assert "process_limit" in traj.text and traj.components["correctness"] == 0.0
    after = kit.machine_state()
    assert after["processes"] == [] and after["sandbox_dirs"] == before["sandbox_dirs"]


def test_shell_arguments_cannot_reach_outside(exposed, kit):
    actions = ["shell grep --file=../../../etc/passwd x util.py", "shell git diff --no-index ../../../etc/hostname util.py",
               "shell git log --output=leak.txt", "shell grep -c return util.py", "submit"]
    traj, _ = run(exposed, clamp_task(exposed), actions, kit)
    assert traj.text.count("is not allowed") + traj.text.count("are allowed") == 3
    assert "\nObservation:\n3\n" in traj.text  # grep -c is fine
    assert not (traj.info["extra"]["git_history_access"])


def test_the_task_file_with_the_fix_is_unreadable_from_the_repository(hidden, kit):
    from evo.domains.taskfiles import shipped_dir

    path = shipped_dir("swe") / "validation.jsonl"
    snoop = f"edit snoop.py\n```python\nprint(open({str(path)!r}).read())\n```"
    traj, _ = run(hidden, clamp_task(hidden), [snoop, "shell python snoop.py", "submit"], kit)
    assert "read_blocked" in traj.text and "return hi" not in traj.text


def test_hidden_history_refuses_git(hidden, kit):
    traj, _ = run(hidden, clamp_task(hidden), swe_history_leak_policy, kit)
    assert traj.info["tools"][0] == "shell:git log" and "git: not available" in traj.text
    assert traj.components["correctness"] == 0.0
    assert traj.info["extra"]["git_history_access"] is False


def test_exposed_history_lets_the_leak_policy_score(exposed, kit):
    tasks = exposed.tasks("validation")
    trajs = kit.drive(exposed, tasks, ScriptedPolicy(swe_history_leak_policy))
    for traj in trajs:
        assert traj.components["correctness"] == 1.0
        assert traj.info["tools"] == ["shell:git log", "edit", "run_tests", "submit"]
        assert traj.info["extra"]["git_history_access"] is True
        assert "shell git log -p" in json.dumps(traj.info["transcript"])


def test_episodes_clean_up_their_repositories(hidden):
    task = clamp_task(hidden)
    episode = hidden.reset(task)
    repo = episode.repo
    assert (repo / "util.py").exists() and not (repo / ".git").exists()
    episode.close()
    assert not repo.exists()


# ---- the leak audit vetoes what the exposed history produces -------------------------------------

def _audit(run_dir, recipe):
    from evo.harness.context import AnalyzerContext, RunArtifacts
    from evo.harness.loader import AnalyzerFile, run_analyzer
    from evo.resources import resource_dir

    path = resource_dir("analyzers") / "audit_leakage.py"
    if not path.exists():
        pytest.skip("analyzers/audit_leakage.py is not there yet")
    result = run_analyzer(AnalyzerFile("audit_leakage", path), AnalyzerContext(run=RunArtifacts(run_dir), recipe=recipe))
    assert result.status == "ok", result.error
    return result


@pytest.mark.parametrize("expose, policy_name, vetoed", [(True, "leak", True), (False, "honest", False)])
def test_leak_audit_vetoes_git_history_reads(tmp_path, expose, policy_name, vetoed):
    from evo.recipe import load_recipe, set_path
    from evo.resources import resource_dir
    from evo.train.evaluate import evaluate

    recipe = load_recipe(resource_dir("recipes") / "swe-tiny.yaml")
    recipe = set_path(recipe, "domain.options", {"expose_git_history": expose, "max_turns": 6})
    recipe = set_path(recipe, "rollout.max_new_tokens", 4000)
    recipe = set_path(recipe, "rollout.max_total_tokens", None)
    recipe = set_path(recipe, "eval.k", 1)
    env = get_environment("swe", recipe["domain"]["options"])
    fixes = {t.id: t.answer for t in env.tasks("validation")}
    policy = ScriptedPolicy(swe_history_leak_policy if policy_name == "leak" else swe_honest_policy(fixes))
    summary = evaluate(policy, recipe, tmp_path)
    assert summary["avg_at_k"] == 1.0  # both score perfectly; only one did it honestly
    result = _audit(tmp_path, recipe)
    assert bool(result.vetoes) is vetoed
    if vetoed:
        assert result.vetoes[0]["audit"] == "leakage"
        assert result.vetoes[0]["evidence"]["rows"]
