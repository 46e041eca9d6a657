"""Plotly figures of the report model (evo.report.data): the lineage tree and the trends.

Each function returns a figure in Plotly's JSON form ({"data": [...], "layout":
{...}}), which the page hands to `Plotly.newPlot`; plain dicts rather than
`plotly.graph_objects`, whose per-element validation costs seconds at 1,000
versions (tests/report check every figure validates as a go.Figure). The
page applies one shared template (DATA.template) to every layout. Points carry
the version name as `customdata`, so clicking one selects that version.
Colours and symbols for version states are defined once here (the PNGs reuse them).
"""

from __future__ import annotations

import html

from evo.vocabulary import Headline

STATE_STYLE = {  # state -> (colour, plotly marker symbol, matplotlib marker)
    "promoted": ("#2e7d32", "circle", "o"),
    "frontier": ("#1565c0", "circle", "o"),
    "awaiting-approval": ("#8e24aa", "square", "s"),
    "reverted": ("#ef6c00", "circle-x", "X"),
    "pruned": ("#9e9e9e", "x", "x"),
}
OUTCOME_COLOUR = {"improvement": "#2e7d32", "regression": "#c62828", "mixed": "#f9a825", "insufficient": "#757575"}
PATH_COLOUR = "#f9a825"  # the promoted path: node rings and edges
MERGE_COLOUR = "#6a1b9a"
LABEL_LIMIT = 80  # above this many versions the tree drops its text labels (hover still names them)
BOUNDARY_LIMIT = 60  # version boundaries drawn in the training curves, at most
TEMPLATE = "plotly_white"
MARGIN = {"l": 50, "r": 20, "t": 40, "b": 40}


def template() -> dict:
    """The layout template every figure of the page uses, once."""
    import plotly.io as pio

    return pio.templates[TEMPLATE].to_plotly_json()


def fmt_delta(c: dict | None) -> str:
    """'Δ +0.094 [+0.062, +0.125]', or '' when not measured."""
    return Headline.from_dict(c).delta_text() if c else ""


def node_label(v: dict) -> str:
    iv = v.get("intervention") or {}
    return str(iv.get("change") or iv.get("factor") or "")


def _hover(v: dict) -> str:
    comps = v["comparisons"]
    lines = [f"<b>{v['name']}</b> ({v['state']})", html.escape(node_label(v)[:90])]
    if v["outcome"]:
        lines.append(f"outcome: {v['outcome']}" + (" (confounded)" if v.get("confounded") else ""))
    for key, what in (("vs_control", "vs control"), ("vs_parent", "vs parent")):
        if comps.get(key):
            lines.append(f"{what}: {fmt_delta(comps[key])}")
    if v["avg_at_k"] is not None:
        lines.append(f"Avg@{v['k']}: {v['avg_at_k']:.3f}")
    return "<br>".join(lines)


def _error_bars(items: list[dict], value: str = "value") -> dict | None:
    """Asymmetric error bars from ci_low / ci_high around `value` (0 where an item has no interval)."""
    if not any("ci_low" in p for p in items):
        return None
    return {"type": "data", "symmetric": False, "color": "#546e7a",
            "array": [(p["ci_high"] - p[value]) if "ci_high" in p else 0 for p in items],
            "arrayminus": [(p[value] - p["ci_low"]) if "ci_low" in p else 0 for p in items]}


def tree(model: dict) -> dict:
    """The lineage DAG: nodes at (version number, lane); first-parent, promoted-path and merge edges."""
    versions = model["versions"]
    traces = []
    groups = (("parent", False, "#b0bec5", 1.5, "solid", "parent → child"),
              ("parent", True, PATH_COLOUR, 4, "solid", "promoted path"),
              ("merge", False, MERGE_COLOUR, 2, "dash", "merge (second parent)"))
    for kind, path, colour, width, dash, name in groups:
        xs, ys, ids = [], [], []
        for e in model["edges"]:
            if e["kind"] == kind and (kind == "merge" or e["on_path"] == path):
                xs += [x for x, _ in e["points"]] + [None]
                ys += [y for _, y in e["points"]] + [None]
                ids += [f"{e['from']}->{e['to']}"] * len(e["points"]) + [None]
        if xs:
            traces.append({"type": "scatter", "x": xs, "y": ys, "mode": "lines", "name": name, "customdata": ids,
                           "hoverinfo": "skip", "line": {"color": colour, "width": width, "dash": dash},
                           "meta": {"role": "edges", "kind": name}})
    small = len(versions) <= LABEL_LIMIT
    style = [STATE_STYLE.get(v["state"], STATE_STYLE["frontier"]) for v in versions]
    traces.append({
        "type": "scatter", "x": [v["x"] for v in versions], "y": [v["lane"] for v in versions],
        "mode": "markers+text" if small else "markers", "text": [v["name"] for v in versions],
        "textposition": "top center", "name": "versions", "showlegend": False,
        "customdata": [v["name"] for v in versions], "hovertext": [_hover(v) for v in versions], "hoverinfo": "text",
        "marker": {"size": 16 if small else 9, "color": [c for c, _, _ in style], "symbol": [m for _, m, _ in style],
                   "line": {"color": [PATH_COLOUR if v["on_path"] else "#ffffff" for v in versions],
                            "width": [3 if v["on_path"] else 1 for v in versions]}},
        "meta": {"role": "nodes"}})
    lanes = max((v["lane"] for v in versions), default=0)
    xs = [v["x"] for v in versions] or [0]
    xaxis = {"title": {"text": "version"}, "showgrid": False, "zeroline": False, "range": [min(xs) - 0.6, max(xs) + 0.6]}
    if len(versions) <= 40:
        xaxis.update(tickvals=xs, ticktext=[v["name"] for v in versions])
    layout = {"height": max(260, 90 + 46 * (1 + lanes)), "margin": {**MARGIN, "t": 60}, "showlegend": True,
              "legend": {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom", "bgcolor": "rgba(0,0,0,0)"},
              "hovermode": "closest", "clickmode": "event", "xaxis": xaxis,
              "yaxis": {"title": {"text": "lane"}, "range": [lanes + 0.6, -0.7], "showgrid": False, "zeroline": False,
                        "dtick": 1}}
    return {"data": traces, "layout": layout}


def path_trend(model: dict) -> dict:
    """Avg@k along the promoted path, with its stratified 95% interval, and per stratum."""
    points = model["path_trend"]
    names = [p["version"] for p in points]
    items = [{**p, "value": p["avg_at_k"]} for p in points]
    traces = [{"type": "scatter", "x": names, "y": [p["avg_at_k"] for p in points], "name": "Avg@k",
               "mode": "lines+markers", "customdata": names, "line": {"color": "#263238", "width": 3},
               "error_y": _error_bars(items)}]
    for s in sorted({s for p in points for s in p["per_stratum"]}):
        strata = [{**p["per_stratum"][s], "version": p["version"]} for p in points if s in p["per_stratum"]]
        traces.append({"type": "scatter", "x": [i["version"] for i in strata], "y": [i["value"] for i in strata],
                       "name": s, "mode": "lines+markers", "line": {"dash": "dot"},
                       "customdata": [i["version"] for i in strata], "error_y": _error_bars(strata)})
    for t in traces:
        if t["error_y"] is None:
            del t["error_y"]
    return {"data": traces, "layout": {"height": 340, "margin": MARGIN, "hovermode": "x unified",
                                       "yaxis": {"title": {"text": "Avg@k"}}, "xaxis": {"title": {"text": "promoted path"}}}}


def deltas(model: dict) -> dict:
    """Each judged version's Δ with its interval: vs its parent, and vs the control where one was trained."""
    judged = [v for v in model["versions"] if v["comparisons"]]
    traces = []
    for key, name, symbol in (("vs_parent", "Δ vs parent", "circle"), ("vs_control", "Δ vs control", "diamond")):
        items = [v for v in judged if (v["comparisons"].get(key) or {}).get("delta") is not None]
        if not items:
            continue
        cs = [v["comparisons"][key] for v in items]
        trace = {"type": "scatter", "x": [v["name"] for v in items], "y": [c["delta"] for c in cs], "mode": "markers",
                 "name": name, "customdata": [v["name"] for v in items], "hoverinfo": "text",
                 "hovertext": [f"{v['name']} {name}: {fmt_delta(c)} ({c.get('outcome') or ''})" for v, c in zip(items, cs)],
                 "marker": {"symbol": symbol, "size": 10, "color": [OUTCOME_COLOUR.get(c.get("outcome"), "#455a64") for c in cs]}}
        bars = _error_bars([{**c, "value": c["delta"]} for c in cs])
        if bars:
            trace["error_y"] = bars
        traces.append(trace)
    layout = {"height": 340, "margin": MARGIN, "hovermode": "closest", "yaxis": {"title": {"text": "Δ headline"}},
              "xaxis": {"title": {"text": "version"}, "type": "category", "categoryorder": "array",
                        "categoryarray": [v["name"] for v in judged]},
              "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": 0, "y1": 0,
                          "line": {"color": "#90a4ae", "width": 1}}]}
    return {"data": traces, "layout": layout}


def training(model: dict) -> dict:
    """Training curves over global steps along the promoted path, one stacked panel per metric."""
    by_name = {v["name"]: v for v in model["versions"]}
    path = [by_name[n] for n in model["promoted_path"] if by_name[n]["training"]["series"]]
    keys = [k for k in model["training_keys"] if any(k in v["training"]["series"] for v in path)]
    if not keys:
        return {}
    n, gap = len(keys), 0.03
    height = (1 - gap * (n - 1)) / n
    layout = {"height": 150 * n + 60, "margin": MARGIN, "showlegend": False, "hovermode": "x unified",
              "annotations": [], "shapes": []}
    traces = []
    for row, key in enumerate(keys, start=1):
        top = 1 - (row - 1) * (height + gap)
        suffix = "" if row == 1 else str(row)
        layout[f"yaxis{suffix}"] = {"domain": [top - height, top], "anchor": f"x{suffix}"}
        layout[f"xaxis{suffix}"] = {"anchor": f"y{suffix}", "matches": "x" if row > 1 else None,
                                    "showticklabels": row == n}
        if row == n:
            layout[f"xaxis{suffix}"]["title"] = {"text": "global training step"}
        layout["annotations"].append({"text": key, "xref": "paper", "yref": "paper", "x": 0.5, "y": top,
                                      "xanchor": "center", "yanchor": "bottom", "showarrow": False})
        xs, ys, who = [], [], []
        for v in path:
            series = v["training"]["series"]
            if key in series:
                xs += series["step"] + [None]
                ys += series[key] + [None]
                who += [v["name"]] * len(series["step"]) + [None]
        traces.append({"type": "scatter", "x": xs, "y": ys, "mode": "lines+markers" if len(xs) <= 200 else "lines",
                       "name": key, "xaxis": f"x{suffix}", "yaxis": f"y{suffix}", "customdata": who,
                       "hovertemplate": "%{customdata} step %{x}: %{y:.4g}<extra></extra>",
                       "marker": {"size": 4}, "line": {"width": 1.5}})
    for axis in [k for k in layout if k.startswith("xaxis")]:
        if layout[axis]["matches"] is None:
            del layout[axis]["matches"]
    layout["shapes"] = [{"type": "line", "xref": "x", "yref": "paper", "x0": v["training"]["global_offset"] - 0.5,
                         "x1": v["training"]["global_offset"] - 0.5, "y0": 0, "y1": 1,
                         "line": {"color": "#cfd8dc", "width": 1, "dash": "dot"}} for v in path[1:BOUNDARY_LIMIT]]
    return {"data": traces, "layout": layout}


def skills(model: dict) -> dict:
    """Uses per skill, stacked by verdict: win (improvement), loss (regression or veto), open."""
    rows = model["skills"]
    if not rows:
        return {}
    traces = [{"type": "bar", "y": [r["skill"] for r in rows], "x": [r[key] for r in rows], "name": key,
               "orientation": "h", "marker": {"color": colour}}
              for key, colour in (("wins", OUTCOME_COLOUR["improvement"]), ("losses", OUTCOME_COLOUR["regression"]),
                                  ("open", OUTCOME_COLOUR["insufficient"]))]
    return {"data": traces, "layout": {"height": 120 + 28 * len(rows), "margin": {**MARGIN, "l": 220},
                                       "barmode": "stack", "xaxis": {"title": {"text": "uses"}},
                                       "yaxis": {"autorange": "reversed"}}}


def all_figures(model: dict) -> dict[str, dict]:
    """Every figure of the page by the id of the element that shows it (empty ones left out)."""
    built = {"tree": tree(model), "path-trend": path_trend(model) if model["path_trend"] else {},
             "deltas": deltas(model), "training": training(model), "skills-plot": skills(model)}
    return {k: v for k, v in built.items() if v}
