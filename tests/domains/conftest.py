"""Fixtures for the domain tests: machine-state snapshots and a rollout helper.

`machine_state()` lists what a sandboxed run could leave behind: live processes
started by the sandbox bootstrap, sandbox folders in the temp dir, pids cgroups.
Hostile-program tests compare it before and after (the `clean_machine` fixture).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest


def _ancestors(pid: int) -> set[int]:
    """`pid` and the pids of its parent, grandparent, ... up to (not including) PID 1."""
    chain = set()
    while pid > 1 and pid not in chain:
        chain.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return chain


def sandbox_processes() -> list[int]:
    """Live processes whose command line is the sandbox bootstrap (zombies excluded), less another
    pytest-xdist worker's: under `-n 2` the other worker's fork bomb is running, not left behind. A
    process is that worker's while it descends from our common parent but not from us; one reparented
    away from both (an orphan) is counted, since whoever left it, it is a leak."""
    me, parent = os.getpid(), os.getppid()
    sibling_worker = os.environ.get("PYTEST_XDIST_WORKER") is not None
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"sandbox_child" not in cmdline or state == "Z":
            continue
        chain = _ancestors(int(name))
        if sibling_worker and parent in chain and me not in chain:
            continue
        found.append(int(name))
    return found


def machine_state() -> dict:
    tmp = Path(tempfile.gettempdir())
    cgroups = Path("/sys/fs/cgroup/pids")
    return {
        "processes": sandbox_processes(),
        "sandbox_dirs": sorted(p.name for p in tmp.glob("evo-sbx-*")),
        "cgroups": sorted(p.name for p in cgroups.glob("evo-sandbox-*")) if cgroups.is_dir() else [],
    }


def drive(env, tasks, policy, group_size: int = 1, max_new_tokens: int = 4000, max_total_tokens=None):
    """Run `policy` on `tasks` through the real rollout driver (single- and multi-turn alike)."""
    from evo.train.rollout import RolloutLimits, rollout

    limits = RolloutLimits(max_new_tokens=max_new_tokens, max_total_tokens=max_total_tokens, stop=tuple(env.stop))
    return rollout(env, list(tasks), policy, group_size, limits, seed=0)


def score_one(env, task, response: str):
    """One single-turn step: (components, info)."""
    episode = env.reset(task)
    try:
        result = episode.step(response)
    finally:
        episode.close()
    assert result.done
    return result.components, result.info


@pytest.fixture
def clean_machine():
    """Asserts after the test that no sandbox process, folder or cgroup was left behind."""
    before = machine_state()
    yield
    after = machine_state()
    deadline = time.monotonic() + 15.0
    while after["processes"] and time.monotonic() < deadline:  # SIGKILLed jails on a loaded machine take a moment
        time.sleep(0.2)
        after = machine_state()
    assert after["processes"] == [], "leftover sandbox processes 15 s after the test (pid: ancestors): " + "; ".join(
        f"{pid}: {sorted(_ancestors(pid))}" for pid in after["processes"][:5])
    assert after["sandbox_dirs"] == before["sandbox_dirs"], "a sandbox folder was not removed"
    assert after["cgroups"] == before["cgroups"], "a pids cgroup was not removed"


@pytest.fixture
def kit():
    return SimpleNamespace(machine_state=machine_state, sandbox_processes=sandbox_processes, drive=drive,
                           score_one=score_one)
