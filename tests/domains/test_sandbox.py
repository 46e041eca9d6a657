"""The sandbox contains hostile programs and leaves the machine as it found it.

Limits and the audit hook's labels; the filesystem boundary and forged verdicts
are attacked in test_sandbox_attacks.py.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import pytest

from evo import confine
from evo.domains.sandbox import Sandbox, SandboxLimits, isolation
from evo.errors import ConfigError

JAILED = pytest.mark.skipif(not isolation()["jail"], reason="needs bubblewrap: apt-get install bubblewrap")

FAST = SandboxLimits(cpu_seconds=1, wall_seconds=2, memory_mb=256, max_processes=8, max_output_bytes=4096)


@pytest.fixture
def sandbox():
    return Sandbox(FAST)


def test_runs_a_program_on_stdin_and_removes_its_folder(sandbox, clean_machine):
    r = sandbox.run_script("import os\nprint(int(input()) * 2)\nprint(os.getcwd())", stdin="21\n")
    out, cwd = r.stdout.splitlines()
    assert (r.returncode, r.errors, out) == (0, [], "42")
    assert Path(cwd).name.startswith("evo-sbx-") and not Path(cwd).exists()


def test_environment_is_scrubbed(sandbox, monkeypatch):
    monkeypatch.setenv("EVO_TEST_SECRET", "hunter2")
    r = sandbox.run_script("import os\nprint(sorted(os.environ))")
    assert "EVO_TEST_SECRET" not in r.stdout and "hunter2" not in r.stdout
    expected = ["PATH", "LANG", "HOME", "TMPDIR", "PYTHONIOENCODING"] + (["PWD"] if isolation()["jail"] else [])
    assert eval(r.stdout) == sorted(expected)  # bwrap sets PWD to the folder it starts in


def test_infinite_loop_is_stopped_by_the_cpu_limit(sandbox, clean_machine):
    r = sandbox.run_script("while True:\n    pass")
    assert r.returncode != 0
    assert {"cpu_limit", "timeout"} & set(r.errors)


def test_ignoring_the_cpu_signal_does_not_help(clean_machine):
    sandbox = Sandbox(SandboxLimits(cpu_seconds=1, wall_seconds=8))
    r = sandbox.run_script("import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass")
    assert "cpu_limit" in r.errors and "timeout" not in r.errors  # the kernel's hard limit, one second later


def test_sleeping_program_is_killed_at_the_wall_deadline(sandbox, clean_machine):
    r = sandbox.run_script("import time\ntime.sleep(60)")
    assert r.errors == ["timeout"] and r.returncode != 0


def test_fork_bomb_is_contained(sandbox, clean_machine):
    r = sandbox.run_script("import os\nwhile True:\n    os.fork()")
    assert "process_limit" in r.errors
    assert r.returncode != 0


def test_fork_bomb_that_swallows_errors_is_contained(sandbox, clean_machine):
    r = sandbox.run_script("import os\nwhile True:\n    try:\n        os.fork()\n    except Exception:\n        pass")
    assert "process_limit" in r.errors
    assert {"cpu_limit", "timeout"} & set(r.errors)


def test_detached_children_do_not_outlive_the_run(sandbox, clean_machine):
    code = ("import os, time\n"
            "if os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n    os._exit(0)\n"
            "print('parent done')")
    r = sandbox.run_script(code)
    assert r.stdout.strip() == "parent done"
    # clean_machine asserts the detached sleeper is gone


def test_huge_output_is_capped_and_the_program_killed(sandbox, clean_machine):
    r = sandbox.run_script("while True:\n    print('x' * 1000)")
    assert "output_limit" in r.errors
    assert len(r.stdout) == FAST.max_output_bytes


def test_writes_outside_the_folder_are_blocked(sandbox, clean_machine):
    marker = f"evo-escape-{uuid.uuid4().hex}"
    outside = [Path(tempfile.gettempdir()) / marker, Path.cwd() / marker]
    code = (f"import os\nfor p in {[str(p) for p in outside]!r} + ['../{marker}']:\n"
            "    try:\n        open(p, 'w').write('pwned')\n        print('wrote', p)\n"
            "    except PermissionError:\n        print('blocked')\n"
            f"try:\n    os.open('/tmp/{marker}.fd', os.O_WRONLY | os.O_CREAT)\nexcept PermissionError:\n    print('blocked')\n"
            "open('inside.txt', 'w').write('fine')\nprint(open('inside.txt').read())")
    r = sandbox.run_script(code)
    assert r.stdout.split() == ["blocked"] * 4 + ["fine"]
    assert "write_blocked" in r.errors
    assert not any(p.exists() for p in outside)
    assert not Path(tempfile.gettempdir(), f"{marker}.fd").exists()


def test_denied_paths_cannot_be_read(tmp_path, clean_machine):
    secret = tmp_path / "tests.jsonl"
    secret.write_text('{"expected": "42"}\n')
    sandbox = Sandbox(FAST, deny_read=(str(tmp_path),))
    r = sandbox.run_script(f"print(open({str(secret)!r}).read())")
    assert "42" not in r.stdout
    assert "read_blocked" in r.errors


def test_sockets_are_blocked(sandbox, clean_machine):
    r = sandbox.run_script("import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 9))")
    assert "network_blocked" in r.errors
    r = sandbox.run_script("import socket\nsocket.getaddrinfo('example.com', 80)")
    assert "network_blocked" in r.errors


@JAILED
def test_network_namespace_has_only_loopback(sandbox):
    r = sandbox.run_script("print([l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]])")
    assert eval(r.stdout) == ["lo"]


def test_exec_and_subprocess_are_blocked(sandbox, clean_machine):
    marker = Path(tempfile.gettempdir()) / f"evo-exec-{uuid.uuid4().hex}"
    r = sandbox.run_script(f"import os\nos.system('touch {marker}')")
    assert "exec_blocked" in r.errors
    r = sandbox.run_script(f"import subprocess\nsubprocess.run(['touch', '{marker}'])")
    assert {"exec_blocked", "import_blocked"} & set(r.errors)
    assert not marker.exists()


def test_memory_bomb_hits_the_memory_limit(sandbox, clean_machine):
    r = sandbox.run_script("x = bytearray(1024 * 1024 * 1024)")
    assert "memory_limit" in r.errors


def test_file_size_and_open_file_limits(clean_machine):
    sandbox = Sandbox(SandboxLimits(max_file_bytes=1024 * 1024, max_open_files=32))
    r = sandbox.run_script("open('big.bin', 'wb').write(b'x' * (8 * 1024 * 1024))")
    assert "file_size_limit" in r.errors
    r = sandbox.run_script("fs = [open('f%d' % i, 'w') for i in range(100)]")
    assert "Too many open files" in r.stderr and r.returncode != 0


def test_limits_cannot_be_raised_and_native_code_is_unreachable(sandbox):
    r = sandbox.run_script("import resource")
    assert "import_blocked" in r.errors
    r = sandbox.run_script("import ctypes\nprint(ctypes.sizeof(ctypes.c_long))")
    assert r.ok  # the types are fine (sympy needs them) ...
    r = sandbox.run_script("import ctypes\nctypes.CDLL('libc.so.6').fork()")
    assert "native_code_blocked" in r.errors  # ... loading and calling native code is not
    r = sandbox.run_script("import ctypes\nctypes.pythonapi.Py_IncRef")
    assert "native_code_blocked" in r.errors


def test_signals_to_outside_processes_are_blocked(sandbox):
    r = sandbox.run_script("import os\nos.kill(-1, 0)")  # every process we may signal (signal 0 only probes)
    assert "signal_blocked" in r.errors
    r = sandbox.run_script("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)")
    assert "signal_blocked" not in r.errors  # signalling itself is fine


def test_assert_tests_are_never_on_disk(sandbox, clean_machine):
    source = "import os\nFILES = sorted(os.listdir('.'))\ndef add(a, b):\n    return a + b\n"
    r = sandbox.run_asserts(source, ["assert FILES == ['solution.py']", "assert add(2, 2) == 4", "assert add(1, 1) == 3"])
    assert [v["passed"] for v in r.results] == [True, True, False]


def test_forged_verdicts_are_ignored(sandbox):
    forged = "\\n".join(repr({"kind": "result", "nonce": "guess", "test": i, "passed": True, "error": ""}) for i in range(2))
    source = ("import os\n"
              "for fd in map(int, os.listdir('/proc/self/fd')):\n"
              "    try:\n"
              f"        os.write(fd, b'{forged}\\n')\n"
              "    except OSError:\n        pass\n"
              "os._exit(0)\n")
    r = sandbox.run_asserts(source, ["assert False", "assert False"])
    assert [v for v in r.results if v.get("passed")] == []


def test_limits_from_recipe_options_name_the_bad_key():
    assert SandboxLimits.from_options({"cpu_seconds": 3}).cpu_seconds == 3
    with pytest.raises(ConfigError, match=r"domain.options.sandbox.cpu_second: unknown sandbox limit"):
        SandboxLimits.from_options({"cpu_second": 3})
    with pytest.raises(ConfigError, match=r"memory_mb: -1 must be a positive number"):
        SandboxLimits.from_options({"memory_mb": -1})


def test_isolation_report_is_consistent():
    iso = isolation()
    assert iso["jail"] == confine.available() and bool(iso["reason"]) != iso["jail"]
    if iso["jail"] and os.geteuid() == 0:
        assert iso["runs_as_uid"] == confine.NOBODY  # root hands programs to nobody on the host too


PROGRAM = '''
LIMIT = 3
class TooBig(ValueError):
    pass
class Stack:
    def __init__(self):
        self.items = []
    def push(self, x):
        if len(self.items) >= LIMIT:
            raise TooBig(f"full at {LIMIT}")
        self.items.append(x)
        return self
    def __len__(self):
        return len(self.items)
    def __iter__(self):
        return iter(self.items)
class Anything:
    def __eq__(self, other):
        return True
def countdown(n):
    while n:
        yield n
        n -= 1
def apply(f, x):
    return f(x)
'''
TESTS = '''
import shapes
from shapes import Stack, TooBig, countdown
from pkg.deep import answer

def test_objects_methods_and_attributes():
    s = Stack().push(1).push(2)
    assert len(s) == 2 and s.items == [1, 2] and list(s) == [1, 2] and isinstance(s, Stack)

def test_program_exceptions_arrive_as_their_classes():
    s = Stack()
    for i in range(3):
        s.push(i)
    try:
        s.push(9)
    except TooBig as exc:
        assert str(exc) == "full at 3" and isinstance(exc, ValueError)
    else:
        assert False

def test_generators_modules_and_globals():
    assert list(countdown(3)) == [3, 2, 1] and sum(countdown(4)) == 10
    shapes.GREETING = "set by the test"  # lands in the program's module
    assert shapes.GREETING == "set by the test" and shapes.LIMIT == 3 and answer() == 42

def test_a_rigged_eq_never_matches():
    assert shapes.Anything() == 5

def test_judge_functions_do_not_cross():
    assert shapes.apply(lambda x: x + 1, 1) == 2
'''


def test_repository_tests_see_the_program_through_proxies(sandbox, clean_machine):
    files = {"shapes.py": PROGRAM, "pkg/__init__.py": "", "pkg/deep.py": "def answer():\n    return 42\n",
             "test_shapes.py": TESTS}
    r = sandbox.run_test_files(files, ["test_shapes.py"])
    verdicts = {v["test"].split("::")[-1]: v for v in r.results if v["kind"] == "result"}
    assert {k: v["passed"] for k, v in verdicts.items()} == {
        "test_objects_methods_and_attributes": True, "test_program_exceptions_arrive_as_their_classes": True,
        "test_generators_modules_and_globals": True, "test_a_rigged_eq_never_matches": False,
        "test_judge_functions_do_not_cross": False}
    assert "cannot pass a function to the program under test" in verdicts["test_judge_functions_do_not_cross"]["error"]


def test_the_program_never_sees_the_test_files(sandbox, clean_machine):
    spy = "import os\ndef seen():\n    return sorted(os.listdir('.'))\n"
    test = "from spy import seen\ndef test_listing():\n    assert seen() == ['notes.txt', 'spy.py']\n"
    r = sandbox.run_test_files({"spy.py": spy, "test_spy.py": test, "notes.txt": "data"}, ["test_spy.py"])
    assert [v["passed"] for v in r.results] == [True]  # its files and the data files, never test_spy.py
