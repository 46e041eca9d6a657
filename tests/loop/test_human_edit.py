"""A person's edit committed on main between steps becomes the next step's candidate: never dropped.

The next `evo step` trains it as a version of its own (agent "human"), judged
against its control like any candidate. If it is not promoted, main's files go
back to the head's and the edit lives on in the version's branch; the next
step then proposes something else instead of the same edit again.
"""

from __future__ import annotations

import subprocess

from loop_support import copy_workspace, evo, evo_json


def _git(root, *args):
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def _created(root, version):
    return next(e for e in evo_json("show", "-C", root, version)["events"] if e["event"] == "created")


def test_an_edit_on_main_is_trained_as_a_human_intervention(stepped, tmp_path):
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    text = (root / "recipe.yaml").read_text()
    (root / "recipe.yaml").write_text(text.replace("learning_rate: 0.0001", "learning_rate: 0.0002"))
    _git(root, "commit", "-qam", "try a larger learning rate")
    fsck = evo("fsck", "-C", root, check=False)
    assert fsck.returncode == 1 and "evo step" in fsck.stdout + fsck.stderr
    out = evo("step", "-C", root).stdout
    assert "status: done" in out and "version: v2" in out and "grpo.learning_rate" in out
    created = _created(root, "v2")
    assert created["agent"] == "human" and created["intervention"]["factor"] == "grpo.learning_rate"
    assert "try a larger learning rate" in created["intervention"]["hypothesis"]
    assert "learning_rate: 0.0002" in evo_json("show", "-C", root, "v2")["recipe"]
    shown = evo_json("show", "-C", root, "v2")
    if shown["state"] == "promoted":
        assert "learning_rate: 0.0002" in (root / "recipe.yaml").read_text()
    else:  # not promoted: main is the head's again, the edit stays on the version's ref
        assert (root / "recipe.yaml").read_text() == text
        assert "your edit on main is kept as v2" in _git(root, "log", "-1", "--format=%s", "main")
    assert evo("fsck", "-C", root, check=False).returncode == 0
    # The next step does not propose the same edit again.
    nxt = evo_json("step", "-C", root, "--dry-run")
    assert nxt["status"] == "dry-run" and "grpo.learning_rate: 0.0001 → 0.0002" not in (nxt["intervention"] or "")


def test_a_two_factor_edit_is_rejected_with_the_reason_and_kept(stepped, tmp_path):
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    text = (root / "recipe.yaml").read_text()
    edited = text.replace("learning_rate: 0.0001", "learning_rate: 0.0002").replace("num_generations: 4", "num_generations: 6")
    (root / "recipe.yaml").write_text(edited)
    _git(root, "commit", "-qam", "two things at once")
    out = evo("step", "-C", root).stdout
    assert "status: rejected" in out and "one factor per candidate" in out
    assert (root / "recipe.yaml").read_text() == text, "main is the head's again"
    kept = _git(root, "show", "refs/evo/pruned/v2:recipe.yaml")
    assert "num_generations: 6" in kept and "learning_rate: 0.0002" in kept
    assert not (root / ".evo/artifacts/v2/checkpoint").exists()
