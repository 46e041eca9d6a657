"""Concurrent writers, the writer lock, and constant-cost bulk reads."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

from evo.cli import main
from evo.errors import LockedError
from evo.lineage import Lineage, workspace_lock


def _append_after_barrier(root: str, index: int, barrier) -> None:
    lin = Lineage.open(root)
    barrier.wait()
    lin.append_event("v0", {"event": "skill_used", "skill": f"skill-{index}", "id": f"concurrent-{index}"})


def test_twenty_concurrent_appends_from_separate_processes_lose_nothing(ws):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(20)
    procs = [ctx.Process(target=_append_after_barrier, args=(str(ws), i, barrier)) for i in range(20)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 20
    skills = sorted(e["skill"] for e in Lineage.open(ws).events("v0") if e["event"] == "skill_used")
    assert skills == sorted(f"skill-{i}" for i in range(20))


HOLDER = textwrap.dedent("""
    import sys
    from evo.lineage import workspace_lock
    with workspace_lock(sys.argv[1], "evo step"):
        print("locked", flush=True)
        sys.stdin.read()
""")


def test_a_second_writer_is_refused_with_the_holder_named(lin, ws, h):
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(ws)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = h.snapshot(ws)
        result = CliRunner().invoke(main, ["promote", "v1", "--reason", "x", "-C", str(ws)])
        assert result.exit_code == 1
        line = result.output.strip()
        assert f"another evo process (pid {holder.pid}, 'evo step', since " in line
        assert str(ws / ".evo" / "lock") in line and line.endswith("wait for it to finish")
        assert h.snapshot(ws) == before
    finally:
        holder.kill()  # SIGKILL: no cleanup runs, the lock file still names the dead holder
        holder.wait(30)
    assert str(holder.pid) in (ws / ".evo" / "lock").read_text()
    # A dead holder's lock is free: flock dies with its process.
    with workspace_lock(ws, "evo promote v1"):
        with workspace_lock(ws, "re-entered by the same thread"):
            pass
    assert CliRunner().invoke(main, ["promote", "v1", "--reason", "x", "-C", str(ws)]).exit_code == 0


def test_lock_in_another_thread_is_refused(ws):
    import threading

    errors = []

    def other():
        try:
            with workspace_lock(ws, "thread"):
                pass
        except LockedError as exc:
            errors.append(str(exc))

    with workspace_lock(ws, "evo step"):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert errors and "'evo step'" in errors[0]


def _count_git_processes(trace_file) -> int:
    if not trace_file.exists():
        return 0
    return sum(1 for line in trace_file.read_text().splitlines() if "trace: built-in: git" in line)


@pytest.mark.parametrize("via", ["read_all", "evo log --json"])
def test_bulk_reads_spawn_a_constant_number_of_git_processes(lin, ws, h, tmp_path, monkeypatch, via):
    def count() -> int:
        trace = tmp_path / f"trace-{len(list(tmp_path.glob('trace-*')))}"
        monkeypatch.setenv("GIT_TRACE", str(trace))
        try:
            if via == "read_all":
                records = Lineage.open(ws).read_all()
            else:
                result = CliRunner().invoke(main, ["log", "--json", "-C", str(ws)])
                assert result.exit_code == 0, result.output
                records = json.loads(result.output)["versions"]
        finally:
            monkeypatch.delenv("GIT_TRACE")
        return _count_git_processes(trace), len(records)

    small = count()
    for i in range(1, 13):
        h.make_version(lin, f"v{i}", [f"v{i - 1}"])
        lin.append_event(f"v{i}", {"event": "evaluated", "avg_at_k": 0.1, "k": 4, "n_tasks": 10})
    lin.prune("v3", "dead end")
    large = count()
    assert small[1] == 1 and large[1] == 13
    assert large[0] == small[0] <= 4


def test_bench_script_runs_small(tmp_path):
    """bench/lineage_scale.py at a toy size: it builds, measures and reports its goals."""
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "bench" / "lineage_scale.py"
    proc = subprocess.run([sys.executable, str(script), "--versions", "30", "--repeats", "1", "--dir", str(tmp_path / "b")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["versions_total"] == 31 and result["records_read"] == 31
    assert result["git_processes_small"] == result["git_processes_large"]
    assert {"evo_log_s", "git_log_s", "ratio_vs_git_log", "goal_evo_log_s", "met"} <= set(result)
