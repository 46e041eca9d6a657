"""Helpers for report tests: the loop tests' real-`evo` helpers and test-scale recipe, plus the browser check."""

from __future__ import annotations

import os
import shutil

import pytest
from loop_support import EVO, evo, evo_json, init_workspace, patch_settings  # noqa: F401


def fast_search() -> dict:
    """One alternative beside the head; one calibration seed where the judge has that setting."""
    from evo.schemas import load_schema

    search = {"frontier_size": 1}
    if "calibration_seeds" in load_schema("settings")["properties"]["search"]["properties"]:
        search["calibration_seeds"] = 1
    return search


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
