"""`evo report`: the report model as one self-contained HTML page.

Offline by construction: Plotly's JavaScript bundle (from the installed
`plotly` package), the page's own script (page.js) and style (page.css) are
inlined, so the file opens from disk or a CI artifact with no server and no
network. The model and the figures travel as gzip-compressed, base64-encoded
JSON that the page decodes with the browser's DecompressionStream (Chromium
80, Firefox 113, Safari 16.4 or newer): lineage text compresses about 8x, which
keeps a 1,000-version page well under 10 MB beside Plotly's 4.8 MB bundle.
Writes are atomic (a temporary file renamed into place), so an interrupted
run leaves the previous report intact.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import re
from pathlib import Path

from evo import fileio
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
  <span style="color:#8e24aa">■ awaiting approval</span><span style="color:#ef6c00">⊗ reverted</span>
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
<script type="application/gzip+base64" id="evo-report-data">{data}</script>
<script>{page_js}</script>
</body>
</html>
"""


def encode_data(data) -> str:
    """The page's data block: JSON, gzip-compressed (mtime 0: same input, same bytes), base64.

    Base64 has no '<', so no lineage text can close the <script> element it sits in.
    """
    try:
        text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:  # a NaN or infinity somewhere (a diverged metric): JSON has no such number, JavaScript gets null
        text = json.dumps(_finite(data), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return base64.b64encode(gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0)).decode("ascii")


def _finite(node):
    if isinstance(node, float):
        return node if math.isfinite(node) else None
    if isinstance(node, dict):
        return {k: _finite(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_finite(v) for v in node]
    return node


def page_data(page: str) -> dict:
    """The {model, figures, template} a report page carries (what its script decodes)."""
    match = re.search(r'<script type="application/gzip\+base64" id="evo-report-data">([^<]*)</script>', page)
    if not match:
        raise EvoError("not an evo report page: it has no evo-report-data block")
    return json.loads(gzip.decompress(base64.b64decode(match.group(1))))


def render(model: dict) -> str:
    """The page for `model` (evo.report.data.gather) as one HTML string."""
    from plotly.offline import get_plotlyjs

    from evo.report.figures import all_figures, template

    data = encode_data({"model": model, "figures": all_figures(model), "template": template()})
    plotly_js = get_plotlyjs().replace("</script", "<\\/script")
    return TEMPLATE.format(css=(ASSETS / "page.css").read_text(encoding="utf-8"), plotly_js=plotly_js, data=data,
                           page_js=(ASSETS / "page.js").read_text(encoding="utf-8"))


def write_atomic(path: Path, text: str) -> int:
    """Write the page atomically (`evo.fileio`); returns its size in bytes."""
    raw = text.encode("utf-8")
    fileio.write_atomic(path, raw)
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
