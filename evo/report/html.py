"""`evo report`: the report model as one self-contained HTML page.

Offline by construction: Plotly's JavaScript bundle (from the installed
`plotly` package), the page's own script (page.js) and style (page.css) are
inlined, and the model travels as a JSON `<script>` block, so the file opens
from disk or a CI artifact with no server and no network. Writes are atomic
(a temporary file renamed into place), so an interrupted run leaves the
previous report intact.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from evo.errors import EvoError

ASSETS = Path(__file__).resolve().parent
DEFAULT_OUT = Path(".evo") / "report.html"  # relative to the workspace; .evo/ is git-ignored

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>evo report</title>
<style>{css}</style>
</head>
<body>
<header><h1 id="title">EvoTrainer report</h1><p id="subtitle"></p></header>
<main>
<section class="card" id="totals"><h2>Totals</h2><table id="totals-table"></table></section>
<section class="card" id="lineage" data-needs="tree" data-empty="no versions">
  <h2>Lineage</h2>
  <p class="legend"><span style="color:#2e7d32">● promoted</span><span style="color:#1565c0">● frontier</span>
  <span style="color:#8e24aa">⧗ awaiting approval</span><span style="color:#ef6c00">⊗ reverted</span>
  <span style="color:#9e9e9e">✕ pruned</span><span style="color:#f9a825">◯ ring, thick edge: promoted path</span>
  <span style="color:#6a1b9a">- - merge (second parent)</span> · click a node or a row for its details</p>
  <div id="tree" class="plot"></div>
  <table id="versions"><thead><tr><th>version</th><th>parents</th><th>state</th><th>intervention</th><th>outcome</th>
  <th>vs parent</th><th>vs control</th><th>Avg@k</th></tr></thead><tbody id="versions-body"></tbody></table>
</section>
<section class="card"><div id="details"></div></section>
<section class="card" data-needs="path-trend" data-empty="no evaluation on the promoted path yet">
  <h2>Avg@k along the promoted path (95% stratified bootstrap interval), per stratum</h2><div id="path-trend" class="plot"></div></section>
<section class="card" data-needs="deltas" data-empty="no version judged yet">
  <h2>Each version's Δ with its interval: vs parent, vs control</h2><div id="deltas" class="plot"></div></section>
<section class="card" data-needs="training" data-empty="no metrics.jsonl on the promoted path (artifacts not on this machine?)">
  <h2>Training curves along the promoted path (global steps)</h2><div id="training" class="plot"></div></section>
<section class="card" id="skills"><h2>Skills and memory</h2>
  <div data-needs="skills-plot" data-empty="no skill used yet"><div id="skills-plot" class="plot"></div></div>
  <div id="skills-table"></div>
  <h3>Negative evidence (refuted interventions; never retried)</h3><ul id="negative-evidence"></ul></section>
</main>
<script>{plotly_js}</script>
<script type="application/json" id="evo-report-data">{data}</script>
<script>{page_js}</script>
</body>
</html>
"""


def _json_for_script(data) -> str:
    """JSON safe inside a <script> element: '<' is escaped, so no text can close the element."""
    from plotly.utils import PlotlyJSONEncoder

    return json.dumps(data, cls=PlotlyJSONEncoder, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")


def render(model: dict) -> str:
    """The page for `model` (evo.report.data.gather) as one HTML string."""
    from plotly.offline import get_plotlyjs

    from evo.report.figures import all_figures

    figures = all_figures(model)
    if "skills" in figures:
        figures["skills-plot"] = figures.pop("skills")
    template = (figures.get("tree") or {}).get("layout", {}).get("template")
    data = _json_for_script({"model": model, "figures": figures, "template": template})
    plotly_js = get_plotlyjs().replace("</script", "<\\/script")
    return TEMPLATE.format(css=(ASSETS / "page.css").read_text(encoding="utf-8"), plotly_js=plotly_js, data=data,
                           page_js=(ASSETS / "page.js").read_text(encoding="utf-8"))


def write_atomic(path: Path, text: str) -> int:
    """Write `text` to `path` through a temporary file in the same folder; returns the size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = text.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(raw)


def write_report(root, out=None, *, settings: dict | None = None, progress=None, model: dict | None = None) -> dict:
    """Gather the workspace at `root` and write its page; returns {path, bytes, versions}."""
    from evo.lineage import Lineage
    from evo.report.data import gather

    lineage = Lineage.open(root)
    target = Path(out) if out else lineage.root / DEFAULT_OUT
    if target.is_dir():
        raise EvoError(f"--out {target}: is a folder; give a file name such as {target / 'report.html'}")
    model = model or gather(lineage.root, settings, lineage=lineage, progress=progress)
    size = write_atomic(target, render(model))
    return {"path": str(target.resolve()), "bytes": size, "versions": len(model["versions"])}
