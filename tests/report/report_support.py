"""Helpers for report tests: the real `evo` command, the test recipe, the browser check."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EVO = str(Path(sys.executable).with_name("evo"))
# The loop tests' test-scale baseline (tests/loop/loop_support.py): a generation
# limit too short for the hard stratum, so the first step has a clear fix.
RECIPE = """\
name: arithmetic-report-test
seed: 0
domain: {name: arithmetic}
model: {name: builtin:tiny-char}
rollout: {prompts_per_step: 8, num_generations: 4, max_new_tokens: 4}
grpo: {steps: 3, learning_rate: 0.0001}
reward:
  terms: [{name: correctness, weight: 1.0}]
eval: {k: 4, seed: 42, max_tasks: 48}
"""


def evo(*args, cwd=None, env=None, check=True):
    proc = subprocess.run([EVO, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"evo {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def evo_json(*args, cwd=None):
    return json.loads(evo(*args, "--json", cwd=cwd).stdout)


def chromium_or_skip() -> str:
    """Debian's chromium, or a skip with the reason (a failure under CI, where .ci/run installs it)."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    problem = None if path else "Debian's `chromium` is not installed (apt-get install chromium)"
    if path:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "the `playwright` package is not installed (pip install -e '.[dev]')"
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"{problem}; .ci/run must install it for the report's browser test")
        pytest.skip(problem)
    return path
