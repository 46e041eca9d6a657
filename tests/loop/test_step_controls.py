"""What surrounds a step: the cost gate and approval, dry runs, budgets, bad input,
pull-request bodies, `evo validate`, and candidates from other agent backends."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from loop_support import copy_workspace, evo, evo_json, init_workspace, patch_settings

from evo import confine


def refs_and_notes(root):
    """Everything git knows about the lineage: refs, notes, main's tree, worktrees."""
    run = lambda *a: subprocess.run(["git", *a], cwd=root, capture_output=True, text=True).stdout  # noqa: E731
    return (run("for-each-ref"), run("log", "-p", "--format=%H", "refs/notes/evo/lineage"),
            run("status", "--porcelain"), run("worktree", "list"))


def test_costly_candidate_waits_for_approval_then_runs(stepped, tmp_path):
    # Even a baseline's first training run is gated.
    fresh = init_workspace(tmp_path / "fresh", settings_patch={"gate": {"approval_above_gpu_hours": 0.0}})
    out = evo("step", "-C", fresh).stdout
    assert "status: awaiting-approval" in out and "evo approve v0" in out
    assert not (fresh / ".evo/artifacts/v0/checkpoint").exists()
    evo("reject", "-C", fresh, "v0", "--reason", "not today")
    assert evo_json("status", "-C", fresh)["in_flight"] is None
    # A candidate above the threshold waits; nothing runs until someone approves.
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    patch_settings(root, {"gate": {"approval_above_gpu_hours": 0.0}})
    out = evo("step", "-C", root).stdout
    assert "status: awaiting-approval" in out and "version: v2" in out
    assert evo_json("status", "-C", root)["in_flight"]["version"] == "v2"
    assert evo_json("show", "-C", root, "v2")["state"] == "awaiting-approval"
    again = evo("step", "-C", root).stdout
    assert "status: awaiting-approval" in again and not (root / ".evo/artifacts/v2/eval.json").exists()
    evo("approve", "-C", root, "v2", "--reason", "reviewed the PR")
    out = evo("step", "-C", root).stdout
    assert "status: done" in out and (root / ".evo/artifacts/v2/eval.json").exists()
    events = [e["event"] for e in evo_json("show", "-C", root, "v2")["events"]]
    assert events.count("gated") == 2 and events.count("approved") == 1 and events.count("judged") == 1
    # A rejected candidate is pruned and kept as evidence; the journal is cleared.
    assert "status: awaiting-approval" in evo("step", "-C", root).stdout
    evo("reject", "-C", root, "v3", "--reason", "too expensive")
    assert evo_json("show", "-C", root, "v3")["state"] == "pruned"
    assert evo_json("status", "-C", root)["in_flight"] is None
    bad = evo("approve", "-C", root, "v2", check=False)
    assert bad.returncode == 1 and "v2 is not awaiting approval" in bad.stderr


def test_dry_run_shows_the_candidate_and_changes_nothing(stepped, tmp_path):
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    before = refs_and_notes(root)
    data = evo_json("step", "-C", root, "--dry-run")
    assert data["status"] == "dry-run" and data["version"] == "v2" and data["intervention"]
    assert data["estimate"]["tokens_generated"] > 0
    assert refs_and_notes(root) == before
    assert not (root / ".evo/worktrees/v2").exists() and not (root / ".evo/artifacts/v2").exists()


def test_bad_input_is_one_line_and_leaves_the_workspace_as_it_was(stepped, tmp_path):
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    before = refs_and_notes(root)
    # a dirty main
    (root / "recipe.yaml").write_text((root / "recipe.yaml").read_text() + "\n# local edit\n")
    proc = evo("step", "-C", root, check=False)
    assert proc.returncode == 1 and "uncommitted changes (recipe.yaml)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    subprocess.run(["git", "checkout", "recipe.yaml"], cwd=root, check=True)
    # a second concurrent writer
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from evo.lineage.lock import workspace_lock
        with workspace_lock({str(root)!r}, "evo step"):
            print("held", flush=True); time.sleep(30)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = evo("step", "-C", root, check=False)
        assert proc.returncode == 1 and "holds" in proc.stderr and "evo step" in proc.stderr
    finally:
        holder.kill()
        holder.wait()
    assert refs_and_notes(root) == before  # nothing above touched refs, notes, files or worktrees
    # a spent budget
    patch_settings(root, {"budget": {"max_steps": 1}})
    before = refs_and_notes(root)
    proc = evo("step", "-C", root, check=False)
    assert proc.returncode == 1 and "budget.max_steps is spent" in proc.stderr
    # not a workspace
    proc = evo("step", "-C", tmp_path, check=False)
    assert proc.returncode == 1 and "not a git repository" in proc.stderr
    assert refs_and_notes(root) == before


def test_pr_body_carries_the_evidence_a_reviewer_needs(stepped):
    pr = evo_json("pr", "-C", stepped["root"], "v1")
    body = pr["body"]
    for section in ("### Hypothesis", "### Diagnosis of v0", "### Backtest", "### Outcome", "### Audits", "### Diff"):
        assert section in body, section
    assert "95% CI" in body and "recipe.yaml" in body and pr["branch"] == "evo/v1"
    proc = evo("pr", "-C", stepped["root"], "v1", "--open", check=False)
    assert proc.returncode == 1 and ("no git remote" in proc.stderr or "`gh` CLI" in proc.stderr)


def test_validate_checks_what_ci_checks(stepped, tmp_path):
    data = evo_json("validate", "-C", stepped["root"])
    assert any("analyzers" in line for line in data["checked"]) and data["needs_approval"] is False
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    (root / "recipe.yaml").write_text((root / "recipe.yaml").read_text().replace("num_generations: 4", "num_generations: 1"))
    proc = evo("validate", "-C", root, check=False)
    assert proc.returncode == 1 and "rollout.num_generations" in proc.stderr and "2 or more" in proc.stderr


AGENT_SCRIPT = """
import json, pathlib, sys
prompt = sys.stdin.read()
assert "diagnosis" in prompt.lower()
target = sys.argv[1]
pathlib.Path(target).write_text(pathlib.Path(target).read_text() + "\\n# touched by the agent\\n")
pathlib.Path(".evo").mkdir(exist_ok=True)
pathlib.Path(".evo/manifest.json").write_text(json.dumps({
    "kind": "harness", "factor": target, "change": "comment", "hypothesis": "test",
    "evidence": {"findings": [], "metrics": {}}, "predicted_effect": "none", "expected_cost": "none"}))
"""


@pytest.mark.skipif(not confine.available(), reason="the agent runs confined: bubblewrap cannot build a jail on this machine (make test installs it where it can)")
@pytest.mark.parametrize("target,allowed", [("evo.yaml", False), ("analyzers/avg_at_k.py", True)])
def test_command_agent_candidates_are_guarded(stepped, tmp_path, target, allowed):
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    script = tmp_path / "agent" / "agent.py"
    script.parent.mkdir()
    script.write_text(AGENT_SCRIPT)
    patch_settings(root, {"agent": {"backend": "command", "command": f"{sys.executable} {script} {target}",
                                    "sandbox": {"read_only": [str(script.parent)]}}})
    data = evo_json("step", "-C", root, "--dry-run")
    if allowed:
        assert "would be rejected" not in data["message"] and data["intervention"].startswith("[harness] analyzers/avg_at_k.py")
    else:
        assert "would be rejected" in data["message"] and "evo.yaml" in data["message"]
        out = evo("step", "-C", root).stdout  # for real: recorded, rejected and pruned before any training
        assert "status: rejected" in out
        shown = evo_json("show", "-C", root, "v2")
        assert shown["state"] == "pruned" and "rejected" in [e["event"] for e in shown["events"]]
        assert not (root / ".evo/artifacts/v2/checkpoint").exists()
