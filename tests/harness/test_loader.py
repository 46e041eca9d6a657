"""The analyzer contract: loading by path, overrides, harness version, broken analyzers."""

import json
import textwrap

import pytest

from evo.harness.diagnose import diagnose
from evo.harness.isolation import load_analyzers
from evo.harness.loader import discover, harness_version
from evo.resources import resource_dir

BUILTINS = resource_dir("analyzers")


def write(folder, name, body):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(textwrap.dedent(body))
    return folder / name


@pytest.fixture
def run(tmp_path, art):
    return art.write_run(tmp_path / "run", rollouts_t=art.rollouts(), eval_t=art.eval_table({f"t{i}": [1, 0] for i in range(6)}))


BROKEN = {
    "import_error.py": "import not_a_module_anywhere\nLAYER = 'score'\ndef analyze(ctx):\n    return {}\n",
    "raises.py": "LAYER = 'signal'\ndef analyze(ctx):\n    return 1 / 0\n",
    "bad_return.py": "LAYER = 'signal'\ndef analyze(ctx):\n    return [1, 2]\n",
    "bad_key.py": "LAYER = 'signal'\ndef analyze(ctx):\n    return {'metrics': {'dead_groups': 0.5}, 'findings': []}\n",
    "bad_severity.py": "LAYER = 'behavior'\ndef analyze(ctx):\n    return {'metrics': {}, 'findings': [{'id': 'x', 'severity': 'panic', 'message': 'm'}]}\n",
    "no_layer.py": "def analyze(ctx):\n    return {'metrics': {}, 'findings': []}\n",
    "exits.py": "import sys\nLAYER = 'score'\ndef analyze(ctx):\n    sys.exit(3)\n",
}


def test_broken_workspace_analyzers_become_findings_not_crashes(tmp_path, run):
    ws = tmp_path / "ws_analyzers"
    for name, body in BROKEN.items():
        write(ws, name, body)
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws])
    errors = [f for f in diag["findings"] if f["id"] == "harness.analyzer_error"]
    assert len(errors) == len(BROKEN)
    by_name = {f["evidence"]["values"]["analyzer"]: f for f in errors}
    assert "ModuleNotFoundError" in by_name["import_error"]["message"] and "ws_analyzers/import_error.py" in by_name["import_error"]["message"]
    assert "ZeroDivisionError" in by_name["raises"]["message"] and "raises.py:3" in by_name["raises"]["message"]
    assert "must return a dict" in by_name["bad_return"]["message"]
    assert "'dead_groups' is not namespaced" in by_name["bad_key"]["message"]
    assert "'panic'" in by_name["bad_severity"]["message"]
    assert "LAYER" in by_name["no_layer"]["message"]
    assert "SystemExit" in by_name["exits"]["message"]
    assert all(f["severity"] == "warning" for f in errors)
    status = {a["name"]: a["status"] for a in diag["analyzers"]}
    assert status["raises"] == "error" and status["avg_at_k"] == "ok"
    assert "score/avg_at_k" in diag["metrics"]  # the built-ins still ran
    assert json.loads((run / "diagnosis.json").read_text())["findings"] == diag["findings"]


def test_workspace_file_overrides_builtin_of_same_name(tmp_path, run):
    ws = tmp_path / "analyzers"
    write(ws, "dead_groups.py", """\
        LAYER = "signal"
        def analyze(ctx):
            return {"metrics": {"signal/dead_group_ratio": 0.123, "signal/custom": 1}, "findings": []}
        """)
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws])
    assert diag["metrics"]["signal/dead_group_ratio"] == 0.123
    assert diag["metrics"]["signal/custom"] == 1
    assert "signal/dead_group_ratio_recent" not in diag["metrics"]  # the built-in did not run
    paths = [a["path"] for a in diag["analyzers"] if a["name"] == "dead_groups"]
    assert paths == [str((ws / "dead_groups.py").resolve())]


def test_harness_version_hashes_names_and_contents(tmp_path):
    ws = tmp_path / "a"
    write(ws, "one.py", "LAYER = 'score'\ndef analyze(ctx):\n    return {}\n")
    v1 = harness_version(discover([BUILTINS, ws]))
    assert len(v1) == 12 and all(c in "0123456789abcdef" for c in v1)
    assert harness_version(discover([BUILTINS, ws])) == v1
    write(ws, "one.py", "LAYER = 'score'\ndef analyze(ctx):\n    return {'metrics': {}}\n")
    v2 = harness_version(discover([BUILTINS, ws]))
    (ws / "one.py").rename(ws / "two.py")
    v3 = harness_version(discover([BUILTINS, ws]))
    assert len({v1, v2, v3}) == 3
    assert harness_version(discover([BUILTINS])) not in {v1, v2, v3}


def test_vetoes_from_a_non_audit_are_ignored_with_a_finding(tmp_path, run):
    ws = tmp_path / "analyzers"
    write(ws, "sneaky.py", """\
        LAYER = "behavior"
        def analyze(ctx):
            return {"metrics": {}, "findings": [], "vetoes": [{"message": "no"}]}
        """)
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws])
    assert diag["audits"]["vetoed"] is False
    assert any(f["id"] == "harness.veto_ignored" for f in diag["findings"])


def test_a_failing_audit_is_reported_as_not_cleared(tmp_path, run):
    ws = tmp_path / "analyzers"
    write(ws, "audit_strict.py", "LAYER = 'version'\nAUDIT = True\nNAME = 'strict'\ndef analyze(ctx):\n    raise RuntimeError('boom')\n")
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws])
    assert diag["audits"]["failed"] == ["strict"]
    err = [f for f in diag["findings"] if f["id"] == "harness.analyzer_error"][0]
    assert "audit failed" in err["message"] and "could not clear" in err["message"]


def test_analyzer_kit_findings_and_numpy_values_are_accepted(tmp_path, run):
    ws = tmp_path / "analyzers"
    write(ws, "np_values.py", """\
        import numpy as np
        from evo.harness import kit
        LAYER = "signal"
        def analyze(ctx):
            return {"metrics": {"signal/x": np.float32(0.5), "signal/n": np.int64(3), "signal/nan": float("nan")},
                    "findings": [kit.finding("signal.x", "info", "ok", rows=np.array(["a", "b"]), values={"v": np.arange(2)})]}
        """)
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws])
    assert diag["metrics"]["signal/x"] == 0.5 and diag["metrics"]["signal/n"] == 3
    assert "signal/nan" not in diag["metrics"]
    f = [f for f in diag["findings"] if f["id"] == "signal.x"][0]
    assert f["evidence"] == {"rows": ["a", "b"], "values": {"v": [0, 1]}}
    entry = [a for a in diag["analyzers"] if a["name"] == "np_values"][0]
    assert "signal/nan" in entry["note"]


def test_load_analyzers_lists_builtins_and_problems(tmp_path):
    ws = tmp_path / "analyzers"
    write(ws, "raises.py", BROKEN["import_error.py"])
    analyzers, problems = load_analyzers([BUILTINS, ws])
    names = {a["name"] for a in analyzers}
    assert {"avg_at_k", "dead_groups", "leakage", "tampering", "collapse"} <= names
    assert {a["layer"] for a in analyzers} == {"score", "signal", "behavior", "version"}
    assert [p["file"].endswith("raises.py") for p in problems] == [True]
    assert sum(a["audit"] for a in analyzers) == 3


def test_every_builtin_declares_a_layer_and_audits_are_named_audit(tmp_path):
    analyzers, problems = load_analyzers([BUILTINS])
    assert problems == []
    for a in analyzers:
        assert a["audit"] == a["path"].split("/")[-1].startswith("audit_")


def test_analyzer_may_define_dataclasses_and_helpers(tmp_path, run):
    ws = tmp_path / "analyzers"
    write(ws, "with_dataclass.py", """\
        from dataclasses import dataclass
        LAYER = "signal"
        @dataclass
        class Threshold:
            value: float = 0.5
        def analyze(ctx):
            return {"metrics": {"signal/threshold": Threshold().value}, "findings": []}
        """)
    diag = diagnose(run, recipe={}, analyzer_dirs=[BUILTINS, ws])
    assert diag["metrics"]["signal/threshold"] == 0.5


def test_workers_import_the_evo_the_host_runs_not_the_installed_one(tmp_path):
    """A second checkout run through PYTHONPATH: its analyzer workers must import that copy (jailed or not)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import evo

    copy = tmp_path / "checkout"
    shutil.copytree(Path(evo.__file__).resolve().parent, copy / "evo", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(BUILTINS, copy / "analyzers")  # a checkout's built-in resources sit beside its package
    (copy / "evo" / "only_in_this_copy.py").write_text("MARK = 1\n")
    ws = tmp_path / "analyzers"
    write(ws, "which_evo.py", """
        from evo import only_in_this_copy
        LAYER = "signal"
        def analyze(ctx):
            return {"metrics": {"signal/copy_mark": float(only_in_this_copy.MARK)}}
    """)
    script = ("import json, evo; from evo.harness.isolation import load_analyzers; "
              f"a, p = load_analyzers([{str(ws)!r}]); print(json.dumps([evo.__file__, [x['name'] for x in a], p]))")
    env = {**os.environ, "PYTHONPATH": str(copy)}
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    host_file, names, problems = json.loads(out.stdout.strip().splitlines()[-1])
    assert host_file.startswith(str(copy))
    assert problems == [] and names == ["which_evo"]
