"""Experiment trackers, read back with each library's own reader.

W&B offline (no network): the run's transaction log holds every step's metric
keys at global steps, a completions table per step, the eval and the version's
lineage summary. TensorBoard: tensorboard's EventAccumulator finds every
step's metrics. Trackio: its SQLite store holds the steps. A missing tracker
package is a one-line error naming the extra.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
import yaml
from report_support import evo, evo_json

from evo.lineage import Lineage
from evo.report.runs import read_metrics, version_offset
from evo.settings import artifact_dir, load_settings


def _trained_child(workspace) -> str:
    """A trained version with a parent, so its global steps start past its parent's."""
    root = workspace["root"]
    return next(r["name"] for r in workspace["rows"] if r["parents"] and read_metrics(artifact_dir(root, load_settings(root), r["name"])))


def _expected(root, version):
    settings = load_settings(root)
    rows = read_metrics(artifact_dir(root, settings, version))
    offset = version_offset(root, settings, Lineage.open(root).read_all(), version)
    return rows, offset


def _configure(root, logging: dict) -> None:
    settings = yaml.safe_load((root / "evo.yaml").read_text())
    settings["logging"] = logging
    (root / "evo.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))


def test_wandb_offline_run_holds_every_step_the_completions_and_the_lineage_summary(workspace_copy, tmp_path):
    pytest.importorskip("wandb")
    from wandb_records import read_run

    root = workspace_copy
    version = _trained_child({"root": root, "rows": evo_json("log", "-C", root)["versions"]})
    _configure(root, {"completions_per_step": 3, "wandb": {"mode": "offline", "dir": str(tmp_path / "wb")}})
    logged = evo_json("track", "-C", root, version)  # no --to: the trackers evo.yaml's logging: sets
    run_folder = logged["logged"]["wandb"]
    assert run_folder.startswith(str(tmp_path / "wb" / "wandb" / "offline-run-"))
    run = read_run(run_folder)
    rows, offset = _expected(root, version)
    assert offset > 0
    assert run["run"]["name"] == version and run["run"]["group"] == root.name and run["run"]["job_type"] == "version"

    history = [h for h in run["history"] if "reward/mean" in h]
    assert [h["_step"] for h in history] == [offset + r["step"] for r in rows]
    numeric = {k for r in rows for k, v in r.items() if k != "step" and isinstance(v, (int, float))}
    for h, r in zip(history, rows):
        assert numeric <= set(h), numeric - set(h)
        assert h["reward/mean"] == pytest.approx(r["reward/mean"])
        assert h["completions/_type"] == "table-file" and h["completions/nrows"] == 3
    tables = sorted((p for p in (tmp_path / "wb").rglob("completions_*.table.json")))
    assert len(tables) == len(rows)
    table = json.loads(tables[0].read_text())
    assert table["columns"][:7] == ["step", "group", "sample", "task_id", "stratum", "prompt", "completion"]
    assert all(isinstance(row[6], str) for row in table["data"])

    shown = evo_json("show", "-C", root, version)
    summary = run["summary"]
    assert summary["version"] == version and summary["workspace"] == root.name
    assert summary["parent"] == shown["parents"][0] and summary["state"] == shown["state"]
    assert summary["outcome"] == shown["outcome"]
    assert summary["deciding/delta"] == pytest.approx(shown["headline"]["delta"])
    assert summary["deciding/ci_low"] == pytest.approx(shown["headline"]["ci_low"])
    assert summary["eval/avg_at_k"] == pytest.approx(shown["avg_at_k"])
    assert run["run"]["config"]["intervention/factor"] == summary["intervention/factor"]


def test_tensorboard_events_hold_every_steps_metrics(workspace_copy, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = workspace_copy
    version = _trained_child({"root": root, "rows": evo_json("log", "-C", root)["versions"]})
    first = evo_json("track", "-C", root, version, "--to", "tensorboard", "--log-dir", tmp_path / "tb")
    again = evo_json("track", "-C", root, version, "--to", "tensorboard", "--log-dir", tmp_path / "tb")
    folder = tmp_path / "tb" / root.name / version
    assert first["logged"]["tensorboard"] == again["logged"]["tensorboard"] == str(folder)
    assert len(list(folder.glob("events.out.tfevents.*"))) == 1, "re-logging must replace the run, not double it"
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    rows, offset = _expected(root, version)
    keys = {k for r in rows for k, v in r.items() if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert keys <= set(acc.Tags()["scalars"])
    for key in keys:
        events = acc.Scalars(key)
        assert [e.step for e in events] == [offset + r["step"] for r in rows if key in r], key
        assert [e.value for e in events] == pytest.approx([float(r[key]) for r in rows if key in r], rel=1e-6), key
    assert "eval/avg_at_k" in acc.Tags()["scalars"]
    texts = acc.Tags()["tensors"]
    assert "completions/text_summary" in texts and "lineage/text_summary" in texts
    assert [e.step for e in acc.Tensors("completions/text_summary")] == [offset + r["step"] for r in rows]


def test_a_plain_run_folder_logs_from_step_zero(workspace, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = workspace["root"]
    version = _trained_child(workspace)
    run_dir = artifact_dir(root, load_settings(root), version)
    logged = evo_json("track", run_dir, "--to", "tensorboard", "--log-dir", tmp_path / "tb")
    acc = EventAccumulator(logged["logged"]["tensorboard"], size_guidance={"scalars": 0})
    acc.Reload()
    rows = read_metrics(run_dir)
    assert [e.step for e in acc.Scalars("reward/mean")] == [r["step"] for r in rows]
    no_tracker = evo("track", run_dir, check=False)
    assert no_tracker.returncode != 0 and "--to" in no_tracker.stderr and "Traceback" not in no_tracker.stderr


def test_trackio_stores_every_step(workspace, tmp_path):
    pytest.importorskip("trackio")
    root = workspace["root"]
    version = _trained_child(workspace)
    env = {"TRACKIO_DIR": str(tmp_path / "trackio")}
    out = evo("track", "-C", root, version, "--to", "trackio", "--project", "report-test", "--json", env=env)
    assert json.loads(out.stdout)["logged"]["trackio"] == "trackio project report-test"  # stdout: JSON only
    code = ("import json; from trackio.sqlite_storage import SQLiteStorage; "
            f"print(json.dumps([l['step'] for l in SQLiteStorage.get_logs('report-test', {version!r}) if 'reward/mean' in l]))")
    import subprocess

    steps = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                      env={**os.environ, **env}).stdout)
    rows, offset = _expected(root, version)
    assert steps == [offset + r["step"] for r in rows]


def test_a_missing_tracker_package_is_one_line_naming_the_extra(workspace, monkeypatch):
    from evo.errors import MissingDependencyError
    from evo.report.trackers import log_version

    root = workspace["root"]
    settings = load_settings(root)
    settings["logging"] = {"wandb": {"mode": "offline"}}
    monkeypatch.setitem(sys.modules, "wandb", None)  # what an environment without the extra sees
    with pytest.raises(MissingDependencyError) as err:
        log_version(root, settings, _trained_child(workspace))
    message = str(err.value)
    assert "\n" not in message and "pip install 'evotrainer[wandb]'" in message and "logging.wandb" in message


def test_no_tracker_configured_logs_nothing(workspace):
    from evo.report.trackers import log_version

    root = workspace["root"]
    assert log_version(root, load_settings(root), "v0") == {}
