"""The workspace commands end to end, through the real `evo` entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from evo.cli import main
from evo.lineage import Lineage


def evo(*args: str, ok: bool = True):
    result = CliRunner().invoke(main, list(args))
    if ok:
        assert result.exit_code == 0, result.output
    return result


def test_a_user_session_through_every_command(tmp_path, h):
    root = tmp_path / "ws"
    out = evo("init", str(root), "--domain", "arithmetic").output
    assert "baseline v0" in out and "evo step" in out
    C = ("-C", str(root))

    status = json.loads(evo("status", "--json", *C).output)
    assert status["promoted"]["name"] == "v0" and status["frontier"] == [] and status["in_flight"] is None
    assert status["recipe"]["name"] == "arithmetic-tiny-baseline"

    lin = Lineage.open(root)
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"),
                   intervention="rollout.max_new_tokens: 4 -> 8")
    lin.append_event("v1", {"event": "evaluated", "avg_at_k": 0.42, "k": 8, "n_tasks": 40, "per_stratum": {"hard": 0.2}})
    lin.append_event("v1", h.judged(0.42, 0.05))
    h.make_version(lin, "v2", ["v0"], edit=h.set_recipe_value("temperature: 1.0", "temperature: 0.8"))
    (root / ".evo" / "journal").mkdir(parents=True)
    (root / ".evo" / "journal" / "current.json").write_text(json.dumps(
        {"version": "v3", "parents": ["v1"], "phase": "run", "started": "2025-01-01T00:00:00Z", "pid": os.getpid(),
         "phases_done": ["observe", "diagnose"]}))

    status = json.loads(evo("status", "--json", *C).output)
    assert [f["name"] for f in status["frontier"]] == ["v1", "v2"]
    assert status["in_flight"]["phase"] == "run" and status["in_flight"]["running"] is True
    human = evo("status", *C).output
    assert "v3" in human and "phase run" in human and "running" in human

    rows = {r["name"]: r for r in json.loads(evo("log", "--json", *C).output)["versions"]}
    assert rows["v1"]["parents"] == ["v0"] and rows["v1"]["outcome"] == "improvement"
    assert rows["v1"]["intervention"] == "rollout.max_new_tokens: 4 -> 8" and rows["v1"]["headline"]["value"] == 0.42
    table = evo("log", *C).output
    assert "v1" in table and "improvement" in table and "0.420 Δ+0.050 [+0.030, +0.070]" in table

    shown = json.loads(evo("show", "v1", "--json", *C).output)
    assert [e["event"] for e in shown["events"]] == ["created", "evaluated", "judged"]
    assert "max_new_tokens: 8" in shown["recipe"] and shown["changed_paths"] == ["recipe.yaml"]
    art = root / ".evo" / "artifacts" / "v1"
    art.mkdir(parents=True)
    (art / "eval.json").write_text("{}")
    shown = json.loads(evo("show", "v1", "--json", *C).output)
    assert shown["artifacts"]["files"] == [{"name": "eval.json", "size": 2}]
    assert "judged" in evo("show", "v1", *C).output

    d = json.loads(evo("diff", "v0", "v1", "--json", *C).output)
    assert d["recipe"]["changes"] == [{"key": "rollout.max_new_tokens", "v0": 4, "v1": 8, "change": "changed"}]
    assert d["metrics"]["avg_at_k"]["v1"] == 0.42
    assert "max_new_tokens: 4 → 8" in evo("diff", "v0", "v1", *C).output

    assert "promoted v1" in evo("promote", "v1", "--reason", "better", *C).output
    assert "created v3" in evo("merge", "v1", "v2", "--reason", "combine", *C).output
    assert "pruned v2" in evo("prune", "v2", "--reason", "worse", *C).output
    assert "reverted v1" in evo("revert", "v1", "--reason", "regressed", *C).output
    states = {r["name"]: r["state"] for r in json.loads(evo("log", "--json", *C).output)["versions"]}
    assert states == {"v0": "promoted", "v1": "reverted", "v2": "pruned", "v3": "frontier"}
    assert json.loads(evo("status", "--json", *C).output)["promoted"]["name"] == "v0"


def test_read_commands_fail_in_one_line_outside_a_workspace(tmp_path, h):
    for args in (["status"], ["log"], ["show", "v0"], ["diff", "v0", "v1"], ["promote", "v1", "--reason", "x"]):
        result = evo(*args, "-C", str(tmp_path), ok=False)
        assert result.exit_code == 1
        assert result.output.startswith("Error: ") and len(result.output.strip().splitlines()) == 1
        assert "not a git repository" in result.output and "evo init" in result.output


def test_unknown_version_and_missing_reason(ws, h):
    before = h.snapshot(ws)
    result = evo("show", "v7", "-C", str(ws), ok=False)
    assert result.exit_code == 1 and "unknown version 'v7'" in result.output
    result = evo("prune", "v0", "-C", str(ws), ok=False)
    assert result.exit_code == 2 and "--reason" in result.output
    result = evo("promote", "v7", "--reason", "x", "-C", str(ws), ok=False)
    assert result.exit_code == 1 and "unknown version 'v7'" in result.output
    assert h.snapshot(ws) == before


def test_status_reports_a_broken_recipe_without_failing(ws):
    (ws / "recipe.yaml").write_text((ws / "recipe.yaml").read_text().replace("temperature: 1.0", "temperature: hot"))
    status = json.loads(evo("status", "--json", "-C", str(ws)).output)
    assert "rollout.temperature" in status["recipe"]["error"] and "'hot'" in status["recipe"]["error"]
    assert "invalid" in evo("status", "-C", str(ws)).output


def test_lineage_survives_push_clone_and_notes_fetch(tmp_path, h):
    h.git(tmp_path, "init", "-q", "--bare", "--initial-branch=main", "remote.git")
    h.git(tmp_path, "clone", "-q", "remote.git", "ws")
    root = tmp_path / "ws"
    evo("init", str(root))
    lin = Lineage.open(root)
    h.make_version(lin, "v1", ["v0"], edit=h.set_recipe_value("max_new_tokens: 4", "max_new_tokens: 8"))
    lin.append_event("v1", h.judged(0.5, 0.1))
    lin.promote("v1", "up")
    h.make_version(lin, "v2", ["v1"])
    lin.prune("v2", "flat")
    h.git(root, "push", "-q", "origin")  # the refspecs `evo init` configured publish everything

    h.git(tmp_path, "clone", "-q", "remote.git", "copy")
    copy = tmp_path / "copy"
    h.git(copy, "fetch", "-q", "origin", "refs/heads/evo/*:refs/heads/evo/*", "refs/notes/evo/*:refs/notes/evo/*",
          "refs/evo/*:refs/evo/*")

    def view(path):
        return {n: (r.state, r.parents, r.commit, [e["id"] for e in r.events])
                for n, r in Lineage.open(path).read_all().items()}

    assert view(copy) == view(root)
    assert view(copy)["v2"][0] == "pruned" and view(copy)["v1"][0] == "promoted"
    assert (copy / "recipe.yaml").read_text() == (root / "recipe.yaml").read_text()


def test_evo_entry_point_runs_as_a_program(ws):
    proc = subprocess.run([sys.executable, "-c", "from evo.cli import main; main()", "log", "--json", "-C", str(ws)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in json.loads(proc.stdout)["versions"]] == ["v0"]


def test_status_marks_a_step_whose_process_died_as_interrupted(ws):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    journal = ws / ".evo" / "journal"
    journal.mkdir(parents=True)
    (journal / "current.json").write_text(json.dumps({"version": "v1", "parents": ["v0"], "phase": "diagnose",
                                                      "started": "2025-01-01T00:00:00Z", "pid": dead.pid}))
    status = json.loads(evo("status", "--json", "-C", str(ws)).output)
    assert status["in_flight"]["running"] is False
    assert "interrupted; `evo step` resumes it" in evo("status", "-C", str(ws)).output
