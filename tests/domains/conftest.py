"""Fixtures for the domain tests: machine-state snapshots and a rollout helper.

`machine_state()` lists what a sandboxed run could leave behind: live processes
started by the sandbox bootstrap, sandbox folders in the temp dir, pids cgroups.
Hostile-program tests compare it before and after (the `clean_machine` fixture).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest


def sandbox_processes() -> list[int]:
    """Live processes whose command line is the sandbox bootstrap (zombies excluded)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"sandbox_child" in cmdline and state != "Z":
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
    assert after["processes"] == [], f"leftover sandbox processes: {after['processes']}"
    assert after["sandbox_dirs"] == before["sandbox_dirs"], "a sandbox folder was not removed"
    assert after["cgroups"] == before["cgroups"], "a pids cgroup was not removed"


@pytest.fixture
def kit():
    return SimpleNamespace(machine_state=machine_state, sandbox_processes=sandbox_processes, drive=drive,
                           score_one=score_one)
