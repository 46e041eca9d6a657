"""The report model without training: layout, comparisons, global steps, a large synthetic lineage.

The large lineage is `bench/lineage_scale.py`'s builder (real git, real notes),
at 120 versions so the test stays fast.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from evo.report.data import comparisons, gather
from evo.report.html import encode_data, page_data, render
from evo.report.layout import ELBOW, edge_points, lay_out
from evo.report.runs import global_offsets, training_series

BENCH = Path(__file__).resolve().parents[2] / "bench" / "lineage_scale.py"


def test_lanes_keep_the_path_on_lane_zero_continue_first_children_and_reuse_free_lanes():
    versions = [("v0", []), ("v1", ["v0"]), ("v2", ["v1"]), ("v3", ["v1"]), ("v4", ["v3"]), ("v5", ["v1", "v4"]),
                ("v6", ["v5"]), ("v7", ["v6"]), ("v8", ["v6"])]
    pos = lay_out(versions, ["v0", "v1"])
    lanes = {name: lane for name, (_, lane) in pos.items()}
    assert lanes["v0"] == lanes["v1"] == 0
    assert lanes["v2"] == 1  # first branch off the path
    assert lanes["v3"] == 2  # lane 1 is busy after v1 (v2 sits on it)
    assert lanes["v4"] == 2  # the first child carries its parent's lane on
    assert lanes["v5"] == 3 and lanes["v6"] == lanes["v7"] == 3
    assert lanes["v8"] == 1  # lane 1 has been free since x=2 < v6's x: reused
    assert all(x == int(name[1:]) for name, (x, _) in pos.items())
    assert edge_points((1, 0), (3, 2), "parent") == [(1, 0), (1 + ELBOW, 2), (3, 2)]
    assert edge_points((4, 2), (5, 3), "merge") == [(4, 2), (5, 3)]


def _headline(delta, low, high, value=0.5):
    return {"metric": "score/avg_at_k", "value": value, "delta": delta, "ci_low": low, "ci_high": high, "p_value": 0.01}


def test_comparisons_read_the_attributed_and_progress_figures_when_present():
    attributed = {"against": "control", "outcome": "improvement", "control": "steps3-seed0",
                  "headline": {**_headline(0.05, 0.02, 0.08), "noise_floor": 0.01}}
    judged = {"baseline": "v1", "outcome": "improvement", "headline": attributed["headline"], "schema": 2,
              "attributed": attributed,
              "progress": {"against": "v1", "outcome": "improvement", "headline": _headline(0.09, 0.05, 0.12)}}
    c = comparisons(judged, ["v1"])
    assert c["deciding"]["against"] == "control" and c["deciding"]["control"] == "steps3-seed0"
    assert c["vs_control"]["delta"] == 0.05 and c["vs_control"]["noise_floor"] == 0.01
    assert c["vs_parent"]["delta"] == 0.09 and c["vs_parent"]["against"] == "v1"


def test_comparisons_of_a_judge_without_a_control():
    legacy = {"baseline": "v1", "outcome": "mixed", "headline": _headline(0.01, -0.02, 0.04)}
    c = comparisons(legacy, ["v1"])
    assert "vs_control" not in c and c["vs_parent"]["delta"] == 0.01 and c["deciding"]["against"] == "v1"
    v0 = comparisons({"baseline": "base", "outcome": "improvement", "headline": _headline(0.1, 0.05, 0.15)}, [])
    assert v0["vs_parent"]["against"] == "base"
    assert comparisons(None, ["v1"]) == {}


def test_global_steps_sum_the_policies_a_version_trained_on_from_without_recursion():
    n = 1500  # deeper than Python's recursion limit

    def record(i, parents, start=None):
        trained = {"event": "trained", "start": start} if start else None
        return SimpleNamespace(number=i, parents=parents, last=lambda event: trained if event == "trained" else None)

    records = {f"v{i}": record(i, [f"v{i - 1}"] if i else []) for i in range(n)}
    records["v1500"] = record(1500, ["v3", "v1200"])  # a merge: the first parent counts
    records["v1501"] = record(1501, ["v1499"], start="base")  # a repair trained from the base model
    records["v1502"] = record(1502, ["v1499"], start="v10")  # a repair trained from an older ancestor
    offsets = global_offsets(records, {name: 3 for name in records})
    assert offsets["v0"] == 0 and offsets["v10"] == 30 and offsets["v1499"] == 3 * 1499
    assert offsets["v1500"] == offsets["v3"] + 3
    assert offsets["v1501"] == 0 and offsets["v1502"] == 33


def test_training_series_strides_long_runs_but_keeps_the_last_step():
    rows = [{"step": i, "reward/mean": i / 1000, "policy/kl": 0.001} for i in range(1000)]
    s = training_series(rows, offset=50, limit=400)
    assert len(s["step"]) <= 401 and s["step"][0] == 50 and s["step"][-1] == 1049
    assert s["reward/mean"][-1] == pytest.approx(0.999) and "gen/truncated_frac" not in s


def test_the_data_block_cannot_close_its_script_element_and_decodes_back():
    text = encode_data({"model": {"hypothesis": "</script><script>alert(1)</script> <!-- x"}})
    assert "<" not in text and text == encode_data({"model": {"hypothesis": "</script><script>alert(1)</script> <!-- x"}})
    page = f'<script type="application/gzip+base64" id="evo-report-data">{text}</script>'
    assert page_data(page)["model"]["hypothesis"].startswith("</script>")


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("lineage_scale", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from evo.workspace import init_workspace

    root = init_workspace(tmp_path_factory.mktemp("synthetic") / "ws")
    counts = bench.build(root, 120)
    return root, counts


def test_a_large_synthetic_lineage_gathers_and_renders(synthetic):
    root, counts = synthetic
    seen = []
    model = gather(root, progress=lambda done, total: seen.append((done, total)))
    assert len(model["versions"]) == counts["versions"]
    assert seen[-1][0] == seen[-1][1] and len(seen) == 2 * counts["versions"]
    states = {v["state"] for v in model["versions"]}
    assert {"promoted", "pruned", "frontier"} <= states
    assert sum(1 for v in model["versions"] if v["pr_body"]) == min(25, counts["versions"])
    assert len(model["edges"]) == sum(len(v["parents"]) for v in model["versions"])
    assert model["promoted_path"][0] == "v0"
    pruned = [v for v in model["versions"] if v["state"] == "pruned"]
    assert pruned and all(v["comparisons"]["deciding"]["outcome"] == "regression" for v in pruned)

    import plotly.graph_objects as go

    from evo.report.figures import all_figures, template

    figures = all_figures(model)
    assert {"tree", "deltas"} <= set(figures)
    for fig in figures.values():  # the page's figures are plain dicts: each must be a valid Plotly figure
        go.Figure({**fig, "layout": {**fig["layout"], "template": template()}})

    evil = next(v for v in model["versions"] if v["intervention"] and v["name"] != "v0")
    evil["intervention"]["hypothesis"] = "</script><script>document.title='pwned'</script>"
    page = render(model)
    assert len(re.findall(r"</script>", page)) == 3  # plotly, the data block, the page script: nothing injected
    assert page_data(page)["model"]["versions"][evil["number"]]["intervention"]["hypothesis"].startswith("</script>")
