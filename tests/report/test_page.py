"""`evo report` opened in a real headless Chromium (Debian's `chromium`, driven by playwright).

What a person looking at the page would notice: one tree node per version in
its state's colour, each version's state and outcome in the table, the merge
drawn as two edges ending at the merged node, the trend plots drawn (the
training curve with one point per logged step), a click showing a version's
details, and a page that logs no error and requests nothing from the network.
"""

from __future__ import annotations

import json
import re

import pytest
from report_support import chromium_or_skip, evo_json

from evo.report.figures import STATE_STYLE


def _rgb(hex_colour: str) -> str:
    h = hex_colour.lstrip("#")
    return "rgb({}, {}, {})".format(*(int(h[i:i + 2], 16) for i in (0, 2, 4)))


@pytest.fixture(scope="module")
def page(workspace, tmp_path_factory):
    """The report loaded in Chromium; yields (page, info) with every console message and request seen."""
    executable = chromium_or_skip()
    from playwright.sync_api import sync_playwright

    out = tmp_path_factory.mktemp("page") / "report.html"
    written = evo_json("report", "-C", workspace["root"], "--out", out)
    assert written["path"] == str(out) and out.stat().st_size == written["bytes"]
    info = {"console": [], "errors": [], "requests": [], "written": written}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: info["console"].append((m.type, m.text)))
        page.on("pageerror", lambda e: info["errors"].append(str(e)))
        page.on("request", lambda r: info["requests"].append(r.url))
        page.route(re.compile(r"^(?!file:).*"), lambda route: route.abort())  # nothing leaves the machine
        page.goto(out.as_uri())
        page.wait_for_selector("body[data-ready=true]", timeout=30_000)
        yield page, info
        browser.close()


def test_the_page_loads_offline_without_errors(page):
    pg, info = page
    assert info["errors"] == [], info["errors"]
    noisy = [(t, m) for t, m in info["console"] if t in ("error", "warning") or "WARN" in m]
    assert noisy == [], noisy
    assert info["requests"] == [pg.url], f"the page requested more than itself: {info['requests']}"
    assert "plotly" in pg.evaluate("typeof Plotly === 'object' ? 'plotly' : 'missing'")


def test_one_node_per_version_with_its_state_and_outcome(page, workspace):
    pg, _ = page
    rows = workspace["rows"]
    shown = pg.evaluate("""() => Array.from(document.querySelectorAll('.version-row')).map(r => ({
        name: r.dataset.version, state: r.dataset.state,
        stateText: r.children[2].textContent, outcome: r.querySelector('.outcome').textContent,
        parents: r.children[1].textContent}))""")
    assert [s["name"] for s in shown] == [r["name"] for r in rows]
    for s, r in zip(shown, rows):
        assert s["state"] == r["state"] and s["stateText"].startswith(r["state"]), (s, r)
        assert s["outcome"].startswith(r["outcome"] or "not judged"), (s, r)
        assert s["parents"] == (" + ".join(r["parents"]) or "–")
    assert {"promoted", "pruned", "frontier", "awaiting-approval"} <= {r["state"] for r in rows}, "a state is missing"

    nodes = pg.evaluate("""() => {
        const gd = document.getElementById('tree');
        const i = gd.data.findIndex(t => t.meta && t.meta.role === 'nodes');
        const trace = document.querySelectorAll('#tree .scatterlayer .trace')[i];
        return {names: gd.data[i].customdata,
                fills: Array.from(trace.querySelectorAll('path.point')).map(p => p.style.fill),
                labels: Array.from(trace.querySelectorAll('.textpoint text')).map(t => t.textContent)};
    }""")
    assert nodes["names"] == [r["name"] for r in rows]
    assert nodes["labels"] == [r["name"] for r in rows]
    assert nodes["fills"] == [_rgb(STATE_STYLE[r["state"]][0]) for r in rows]


def test_the_merge_is_drawn_as_two_edges_into_the_merged_node(page, workspace):
    pg, _ = page
    merged, parents = workspace["merged"], workspace["merge_parents"]
    drawn = pg.evaluate("""(merged) => {
        const gd = document.getElementById('tree');
        const traces = document.querySelectorAll('#tree .scatterlayer .trace');
        const nodes = gd.data.findIndex(t => t.meta && t.meta.role === 'nodes');
        const at = gd.data[nodes].customdata.indexOf(merged);
        const point = traces[nodes].querySelectorAll('path.point')[at].getAttribute('transform');
        const edges = [];
        gd.data.forEach((t, i) => {
            if (!(t.meta && t.meta.role === 'edges')) return;
            const ids = [...new Set(t.customdata.filter(x => x))];
            const paths = Array.from(traces[i].querySelectorAll('path.js-line')).map(p => p.getAttribute('d'));
            ids.forEach((id, k) => edges.push({id, kind: t.meta.kind, d: paths[k]}));
        });
        return {point, edges};
    }""", merged)
    into = [e for e in drawn["edges"] if e["id"].endswith(f"->{merged}")]
    assert sorted(e["id"] for e in into) == sorted(f"{p}->{merged}" for p in parents)
    assert sorted(e["kind"] for e in into) == ["merge (second parent)", "parent → child"]
    node_xy = [float(v) for v in re.findall(r"-?[\d.]+", drawn["point"])[:2]]
    for e in into:  # every drawn edge into the merge ends on the merged node's marker
        assert e["d"], f"edge {e['id']} was not drawn"
        end = [float(v) for v in re.findall(r"-?[\d.]+", e["d"])[-2:]]
        assert abs(end[0] - node_xy[0]) < 1.5 and abs(end[1] - node_xy[1]) < 1.5, (e, node_xy)
    total_edges = sum(len(r["parents"]) for r in workspace["rows"])
    assert len(drawn["edges"]) == total_edges


def test_trend_plots_are_drawn_with_one_point_per_logged_step(page, workspace):
    pg, _ = page
    from evo.lineage import Lineage
    from evo.report.data import promoted_path
    from evo.report.runs import read_metrics
    from evo.settings import artifact_dir, load_settings

    root = workspace["root"]
    records, settings = Lineage.open(root).read_all(), load_settings(root)
    logged = sum(len(read_metrics(artifact_dir(root, settings, v))) for v in promoted_path(records))
    assert logged > 0
    counts = pg.evaluate("""() => {
        const count = (sel) => Array.from(document.querySelectorAll(sel)).map(t => t.querySelectorAll('path.point').length);
        return {training: count('#training .scatterlayer .trace'),
                trend: Array.from(document.querySelectorAll('#path-trend .scatterlayer .trace path.js-line')).map(p => p.getAttribute('d')),
                deltas: count('#deltas .scatterlayer .trace')};
    }""")
    assert counts["training"] and counts["training"][0] == logged  # reward/mean: one marker per step on the path
    assert counts["trend"] and all(d.count("L") >= 1 for d in counts["trend"][:1])
    assert sum(counts["deltas"]) >= len([r for r in workspace["rows"] if r["outcome"]])


def _created(workspace, name: str) -> dict:
    return next(e for e in evo_json("show", "-C", workspace["root"], name)["events"] if e["event"] == "created")


def _revises_harness(created: dict) -> bool:
    intervention = created.get("intervention")
    return bool(created.get("harness_revision")) or (isinstance(intervention, dict) and intervention.get("kind") == "harness")


def test_clicking_a_node_or_a_row_shows_that_versions_details(page, workspace):
    pg, _ = page
    rejected = workspace["rejected"]
    pg.locator("#tree").scroll_into_view_if_needed()
    box = pg.evaluate("""(name) => {
        const gd = document.getElementById('tree');
        const i = gd.data.findIndex(t => t.meta && t.meta.role === 'nodes');
        const p = document.querySelectorAll('#tree .scatterlayer .trace')[i].querySelectorAll('path.point')[gd.data[i].customdata.indexOf(name)];
        const r = p.getBoundingClientRect();
        return {x: r.x + r.width / 2, y: r.y + r.height / 2};
    }""", rejected)
    pg.mouse.click(box["x"], box["y"])  # a click on the pruned node in the tree
    pg.wait_for_selector(f"#details[data-version={rejected}]", timeout=5_000)
    text = pg.inner_text("#details")
    for expected in ("pruned", "Intervention", "Hypothesis", "Gate and cost", "gate: awaiting-approval",
                     "rejected by", "not worth it", "Decisions", f"evo pr {rejected}"):
        assert expected in text, (expected, text[:3000])

    judged = next(r["name"] for r in workspace["rows"] if r["outcome"] and r["parents"])
    pg.click(f".version-row[data-version={judged}]")
    pg.wait_for_selector(f"#details[data-version={judged}]", timeout=5_000)
    text = pg.inner_text("#details")
    for expected in ("Comparisons", "vs parent", "Audits and vetoes", "audits ran:", "Diagnosis findings by layer",
                     "Evaluation", "Training", f"## {judged}:"):
        assert expected in text, (expected, text[:3000])
    assert pg.locator("#detail-training .scatterlayer .trace").count() >= 1

    revisions = [r["name"] for r in workspace["rows"] if _revises_harness(_created(workspace, r["name"]))]
    assert revisions, "the heuristic made no harness revision in two steps"
    pg.click(f".version-row[data-version={revisions[0]}]")
    pg.wait_for_selector(f"#details[data-version={revisions[0]}]", timeout=5_000)
    text = pg.inner_text("#details")
    assert "Harness revision" in text or "[harness]" in text

    merged = workspace["merged"]
    pg.click(f".version-row[data-version={merged}]")
    pg.wait_for_selector(f"#details[data-version={merged}]", timeout=5_000)
    text = pg.inner_text("#details")
    assert "merge reason: combine the head" in text and " + ".join(workspace["merge_parents"]) in text


def test_the_embedded_model_matches_the_lineage(page, workspace):
    pg, _ = page
    model = json.loads(pg.evaluate("JSON.stringify(window.EVO_REPORT.model)"))  # what the page decoded
    assert [v["name"] for v in model["versions"]] == [r["name"] for r in workspace["rows"]]
    judged = [v for v in model["versions"] if v["outcome"]]
    shown = {r["name"]: r for r in workspace["rows"]}
    for v in judged:
        deciding = v["comparisons"]["deciding"]
        assert deciding["delta"] == pytest.approx(shown[v["name"]]["headline"]["delta"])
