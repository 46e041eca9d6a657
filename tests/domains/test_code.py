"""The code domain: documented scores, and hostile programs contained and scored 0 with a reason."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import pytest
from scripted import ScriptedPolicy

from evo.domains import get_environment
from evo.domains.base import Task
from evo.domains.taskfiles import shipped_dir

DOUBLE = Task(id="double", prompt="Read n and print 2n.", stratum="easy",
              meta={"tests": [{"input": "1\n", "output": "2\n"}, {"input": "5\n", "output": "10\n"},
                              {"input": "-3\n", "output": "-6\n"}]})
ADD = Task(id="add", prompt="Write add(a, b).", stratum="easy",
           meta={"tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4"]})


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


@pytest.fixture(scope="module")
def env():
    return get_environment("code", {"sandbox": {"cpu_seconds": 1, "wall_seconds": 2, "memory_mb": 256,
                                                "max_output_bytes": 4096}})


def test_sample_references_pass_their_tests(env, kit):
    tasks = env.tasks("validation")
    assert len(tasks) == 6 and {t.stratum for t in tasks} == {"easy", "medium"}
    policy = ScriptedPolicy(lambda prompt: fenced(next(t.answer for t in tasks if env.render_prompt(t) == prompt)))
    trajs = kit.drive(env, tasks, policy)
    # a sandbox fault ends an episode with no components and its exception in info["error"]: show it
    assert [t.components.get("correctness") for t in trajs] == [1.0] * len(tasks), [t.info.get("error") for t in trajs]


def test_correct_program(env, kit):
    c, info = kit.score_one(env, DOUBLE, fenced("print(2 * int(input()))"))
    assert c == {"correctness": 1.0, "partial_credit": 1.0, "tests_passed_frac": 1.0, "format": 1.0}
    assert info["errors"] == [] and info["test_results"] == [True, True, True]


def test_wrong_and_partially_right_programs(env, kit):
    c, info = kit.score_one(env, DOUBLE, fenced("print(int(input()) + 1)"))  # right only for n = 1
    assert c["correctness"] == 0.0 and c["tests_passed_frac"] == pytest.approx(1 / 3) == c["partial_credit"]
    assert info["errors"] == ["wrong_answer"] and c["format"] == 1.0
    c, info = kit.score_one(env, ADD, fenced("def add(a, b):\n    return abs(a + b) if a > 0 else 7"))
    assert c["tests_passed_frac"] == pytest.approx(2 / 3) and info["test_results"] == [True, False, True]
    c, info = kit.score_one(env, ADD, fenced("def add(a, b):\n    raise ValueError('no')"))
    assert c["tests_passed_frac"] == 0.0 and info["errors"] == ["assert_failed"]


def test_runtime_error_is_recorded(env, kit):
    c, info = kit.score_one(env, DOUBLE, fenced("print(1 / 0)"))
    assert c["correctness"] == 0.0 and info["errors"] == ["runtime_error"]


def test_malformed_and_truncated_responses_score_zero_without_running(env, kit):
    c, info = kit.score_one(env, DOUBLE, "print(2 * int(input()))")
    assert c == dict.fromkeys(c, 0.0) and info["error"] == "no_code_block"
    c, info = kit.score_one(env, DOUBLE, "```python\nprint(2 * int(inp")
    assert c == dict.fromkeys(c, 0.0) and info["error"] == "unclosed_code_block"
    # a full first block and a second one cut off: the first runs, the format gate fails
    c, info = kit.score_one(env, DOUBLE, fenced("print(2 * int(input()))") + "Also:\n```python\nprint(")
    assert c["correctness"] == 1.0 and c["format"] == 0.0


def test_truncation_by_the_token_limit(env, kit):
    (traj,) = kit.drive(env, [DOUBLE], ScriptedPolicy([fenced("print(2 * int(input()))")]), max_new_tokens=40)
    assert traj.finish_reason == "length" and traj.truncated
    assert traj.components["correctness"] == 0.0 and traj.info["error"] == "unclosed_code_block"


# ---- hostile programs ------------------------------------------------------------------------

def test_fork_bomb(env, kit, clean_machine):
    c, info = kit.score_one(env, DOUBLE, fenced("import os\nwhile True:\n    os.fork()"))
    assert c["correctness"] == c["partial_credit"] == 0.0 and "process_limit" in info["errors"]


def test_infinite_loop_skips_the_remaining_tests(env, kit, clean_machine):
    c, info = kit.score_one(env, DOUBLE, fenced("while True:\n    pass"))
    assert c["partial_credit"] == 0.0
    assert {"cpu_limit", "timeout"} & set(info["errors"])
    assert "skipped" in info["errors"]  # the third test never ran: two workers, stop on timeout


def test_huge_output(env, kit, clean_machine):
    c, info = kit.score_one(env, DOUBLE, fenced("while True:\n    print('2' * 10000)"))
    assert c["partial_credit"] == 0.0 and "output_limit" in info["errors"]


def test_writing_outside_its_folder(env, kit, clean_machine):
    target = Path(tempfile.gettempdir()) / f"evo-pwned-{uuid.uuid4().hex}"
    code = f"open({str(target)!r}, 'w').write('x')\nprint(2 * int(input()))"
    c, info = kit.score_one(env, DOUBLE, fenced(code))
    assert c["partial_credit"] == 0.0 and "write_blocked" in info["errors"]
    assert not target.exists()


def test_reading_the_test_file(env, kit, clean_machine):
    data = shipped_dir("code") / "validation.jsonl"
    code = ("import json, glob\n"
            "found = glob.glob('*test*') + glob.glob('../*test*') + glob.glob('/tmp/*test*.json*')\n"
            f"rows = [json.loads(l) for l in open({str(data)!r})]\n"
            "print(rows[0]['tests'][0]['output'])")
    task = get_environment("code", {}).tasks("validation")[0]
    c, info = kit.score_one(env, task, fenced(code))
    assert c["partial_credit"] == 0.0 and "read_blocked" in info["errors"]


def test_opening_a_socket(env, kit, clean_machine):
    code = "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)\nprint(2 * int(input()))"
    c, info = kit.score_one(env, DOUBLE, fenced(code))
    assert c["partial_credit"] == 0.0 and "network_blocked" in info["errors"]


def test_task_file_errors_name_the_line(tmp_path):
    from evo.errors import ConfigError

    f = tmp_path / "code.jsonl"
    f.write_text('{"prompt": "p", "tests": [{"input": "1"}]}\n')
    with pytest.raises(ConfigError, match=r"code.jsonl:1: test .* must be"):
        get_environment("code", {"train_file": str(f)}).tasks("train")
    f.write_text('\n{"prompt": "p", "tests": [{"input": "1"}]}\n')  # a blank line first: the bad task is on line 2
    with pytest.raises(ConfigError, match=r"code.jsonl:2: test .* must be"):
        get_environment("code", {"train_file": str(f)}).tasks("train")
