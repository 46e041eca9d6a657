"""`evo step` training on two data-parallel ranks (evo.yaml run.nproc), for real under torchrun + gloo."""

from __future__ import annotations

import pyarrow.parquet as pq
from loop_support import copy_workspace, evo, evo_json, patch_settings


def test_a_step_trains_on_two_ranks_and_records_the_run_once(stepped, tmp_path):
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    patch_settings(root, {"run": {"nproc": 2}})
    out = evo("step", "-C", root).stdout
    assert "status: done" in out, out
    version = evo_json("status", "-C", root)["promoted"]["name"]
    shown = evo_json("show", "-C", root, "v2")
    assert "trained" in [e["event"] for e in shown["events"]], (version, shown["state"])
    table = pq.read_table(root / ".evo/artifacts/v2/rollouts.parquet")
    assert set(table.column("rank").to_pylist()) == {0, 1}
    ids = table.column("traj_id").to_pylist()
    assert len(ids) == len(set(ids)), "every trajectory exactly once"


def test_a_run_that_cannot_train_stops_the_step_in_one_line_and_records_no_training(stepped, tmp_path):
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    patch_settings(root, {"run": {"nproc": 16}})  # more ranks than the test recipe's 8 prompts per step
    proc = evo("step", "-C", root, check=False)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "16 training ranks" in proc.stderr and "prompts_per_step" in proc.stderr
    status = evo_json("status", "-C", root)
    assert status["in_flight"]["phase"] in ("control", "run")
    events = [e["event"] for e in evo_json("show", "-C", root, "v2")["events"]]
    assert "trained" not in events and "judged" not in events
