"""Fixtures for loop tests: real workspaces, real git, real (test-scale) training.

Training is the expensive part, so one workspace is initialised and stepped
once per session; tests that only read it, or extend it, work on copies.
"""

from __future__ import annotations

import pytest
from loop_support import FAST_SETTINGS, evo, init_workspace, lineage_fingerprint


@pytest.fixture(scope="session")
def stepped(tmp_path_factory):
    """A workspace after `evo init` + one uninterrupted `evo step`, and its lineage fingerprint."""
    root = init_workspace(tmp_path_factory.mktemp("stepped") / "ws", settings_patch=FAST_SETTINGS)
    proc = evo("step", "-C", root)
    return {"root": root, "fingerprint": lineage_fingerprint(root), "stdout": proc.stdout}
