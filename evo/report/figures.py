"""Plotly figures of the report model (evo.report.data): the lineage tree and the trends.

Each function returns a figure as a plain dict (`fig.to_plotly_json()`), which
the page hands to `Plotly.newPlot`. Points carry the version name as
`customdata`, so clicking one selects that version in the page. Colours and
symbols for version states are defined once here (the PNGs reuse them).
"""

from __future__ import annotations

STATE_STYLE = {  # state -> (colour, plotly marker symbol, matplotlib marker)
    "promoted": ("#2e7d32", "circle", "o"),
    "frontier": ("#1565c0", "circle", "o"),
    "awaiting-approval": ("#8e24aa", "hourglass", "s"),
    "reverted": ("#ef6c00", "circle-x", "X"),
    "pruned": ("#9e9e9e", "x", "x"),
}
OUTCOME_COLOUR = {"improvement": "#2e7d32", "regression": "#c62828", "mixed": "#f9a825", "insufficient": "#757575"}
PATH_COLOUR = "#f9a825"  # the promoted path: node rings and edges
MERGE_COLOUR = "#6a1b9a"
LABEL_LIMIT = 80  # above this many versions the tree drops its text labels (hover still names them)
BOUNDARY_LIMIT = 60  # version boundaries drawn in the training curves, at most


def _figure(**layout):
    import plotly.graph_objects as go

    fig = go.Figure()
    fig.update_layout(template="plotly_white", margin=dict(l=50, r=20, t=40, b=40), **layout)
    return fig


def fmt_delta(c: dict | None) -> str:
    """'Δ +0.094 [+0.062, +0.125]', or '' when not measured."""
    if not c or c.get("delta") is None:
        return ""
    text = f"Δ {c['delta']:+.3f}"
    if c.get("ci_low") is not None and c.get("ci_high") is not None:
        text += f" [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"
    return text


def node_label(v: dict) -> str:
    iv = v.get("intervention") or {}
    return str(iv.get("change") or iv.get("factor") or "")


def _hover(v: dict) -> str:
    comps = v["comparisons"]
    lines = [f"<b>{v['name']}</b> ({v['state']})", node_label(v)[:90]]
    if v["outcome"]:
        lines.append(f"outcome: {v['outcome']}" + (" (confounded)" if v.get("confounded") else ""))
    for key, what in (("vs_control", "vs control"), ("vs_parent", "vs parent")):
        if comps.get(key):
            lines.append(f"{what}: {fmt_delta(comps[key])}")
    if v["avg_at_k"] is not None:
        lines.append(f"Avg@{v['k']}: {v['avg_at_k']:.3f}")
    return "<br>".join(lines)


def tree(model: dict) -> dict:
    """The lineage DAG: nodes at (version number, lane); first-parent, promoted-path and merge edges."""
    import plotly.graph_objects as go

    versions = model["versions"]
    fig = _figure(height=max(260, 90 + 46 * (1 + max((v["lane"] for v in versions), default=0))),
                  showlegend=True, legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom", bgcolor="rgba(0,0,0,0)"),
                  hovermode="closest", clickmode="event")
    fig.update_layout(margin=dict(t=60))
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
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, customdata=ids, hoverinfo="skip",
                                     line=dict(color=colour, width=width, dash=dash), meta={"role": "edges", "kind": name}))
    fig.add_trace(go.Scatter(
        x=[v["x"] for v in versions], y=[v["lane"] for v in versions],
        mode="markers+text" if len(versions) <= LABEL_LIMIT else "markers",
        text=[v["name"] for v in versions], textposition="top center", name="versions", showlegend=False,
        customdata=[v["name"] for v in versions], hovertext=[_hover(v) for v in versions], hoverinfo="text",
        marker=dict(size=16 if len(versions) <= LABEL_LIMIT else 9,
                    color=[STATE_STYLE.get(v["state"], STATE_STYLE["frontier"])[0] for v in versions],
                    symbol=[STATE_STYLE.get(v["state"], STATE_STYLE["frontier"])[1] for v in versions],
                    line=dict(color=[PATH_COLOUR if v["on_path"] else "#ffffff" for v in versions],
                              width=[3 if v["on_path"] else 1 for v in versions])),
        meta={"role": "nodes"}))
    lanes = max((v["lane"] for v in versions), default=0)
    xs = [v["x"] for v in versions]
    fig.update_xaxes(title="version", showgrid=False, zeroline=False, range=[min(xs) - 0.6, max(xs) + 0.6],
                     **({"tickvals": xs, "ticktext": [v["name"] for v in versions]} if len(versions) <= 40 else {}))
    fig.update_yaxes(title="lane", range=[lanes + 0.6, -0.7], showgrid=False, zeroline=False, dtick=1)
    return fig.to_plotly_json()


def path_trend(model: dict) -> dict:
    """Avg@k along the promoted path, with its stratified 95% interval, and per stratum."""
    import plotly.graph_objects as go

    points = model["path_trend"]
    fig = _figure(height=340, yaxis_title="Avg@k", xaxis_title="promoted path", hovermode="x unified")
    names = [p["version"] for p in points]

    def bars(items):
        if not any("ci_low" in p for p in items):
            return None
        return dict(type="data", symmetric=False,
                    array=[(p["ci_high"] - p["value"]) if "ci_high" in p else 0 for p in items],
                    arrayminus=[(p["value"] - p["ci_low"]) if "ci_low" in p else 0 for p in items])

    fig.add_trace(go.Scatter(x=names, y=[p["avg_at_k"] for p in points], name="Avg@k", mode="lines+markers",
                             customdata=names, line=dict(color="#263238", width=3),
                             error_y=bars([{**p, "value": p["avg_at_k"]} for p in points])))
    strata = sorted({s for p in points for s in p["per_stratum"]})
    for s in strata:
        items = [{**p["per_stratum"].get(s, {}), "version": p["version"]} for p in points if s in p["per_stratum"]]
        fig.add_trace(go.Scatter(x=[i["version"] for i in items], y=[i["value"] for i in items], name=s,
                                 mode="lines+markers", line=dict(dash="dot"), customdata=[i["version"] for i in items],
                                 error_y=bars(items)))
    return fig.to_plotly_json()


def deltas(model: dict) -> dict:
    """Each judged version's Δ with its interval: vs its parent, and vs the control where one was trained."""
    import plotly.graph_objects as go

    fig = _figure(height=340, yaxis_title="Δ headline", xaxis_title="version", hovermode="closest")
    judged = [v for v in model["versions"] if v["comparisons"]]
    for key, name, symbol in (("vs_parent", "Δ vs parent", "circle"), ("vs_control", "Δ vs control", "diamond")):
        items = [v for v in judged if (v["comparisons"].get(key) or {}).get("delta") is not None]
        if not items:
            continue
        cs = [v["comparisons"][key] for v in items]
        fig.add_trace(go.Scatter(
            x=[v["name"] for v in items], y=[c["delta"] for c in cs], mode="markers", name=name,
            customdata=[v["name"] for v in items],
            hovertext=[f"{v['name']} {name}: {fmt_delta(c)} ({c.get('outcome') or ''})" for v, c in zip(items, cs)],
            hoverinfo="text",
            marker=dict(symbol=symbol, size=10, color=[OUTCOME_COLOUR.get(c.get("outcome"), "#455a64") for c in cs]),
            error_y=dict(type="data", symmetric=False, color="#546e7a",
                         array=[(c.get("ci_high", c["delta"]) - c["delta"]) for c in cs],
                         arrayminus=[(c["delta"] - c.get("ci_low", c["delta"])) for c in cs])))
    fig.add_hline(y=0, line=dict(color="#90a4ae", width=1))
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=[v["name"] for v in judged])
    return fig.to_plotly_json()


def training(model: dict) -> dict:
    """Training curves over global steps along the promoted path, one panel per metric."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    by_name = {v["name"]: v for v in model["versions"]}
    path = [by_name[n] for n in model["promoted_path"] if by_name[n]["training"]["series"]]
    keys = [k for k in model["training_keys"] if any(k in v["training"]["series"] for v in path)]
    if not keys:
        return {}
    fig = make_subplots(rows=len(keys), cols=1, shared_xaxes=True, vertical_spacing=0.03, subplot_titles=keys)
    fig.update_layout(template="plotly_white", height=150 * len(keys) + 60, showlegend=False,
                      margin=dict(l=50, r=20, t=40, b=40), hovermode="x unified")
    for row, key in enumerate(keys, start=1):
        xs, ys, who = [], [], []
        for v in path:
            series = v["training"]["series"]
            if key in series:
                xs += series["step"] + [None]
                ys += series[key] + [None]
                who += [v["name"]] * len(series["step"]) + [None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers" if len(xs) <= 200 else "lines", name=key,
                                 customdata=who, hovertemplate="%{customdata} step %{x}: %{y:.4g}<extra></extra>",
                                 marker=dict(size=4), line=dict(width=1.5)), row=row, col=1)
    for v in path[1:BOUNDARY_LIMIT]:
        fig.add_vline(x=v["training"]["global_offset"] - 0.5, line=dict(color="#cfd8dc", width=1, dash="dot"))
    fig.update_xaxes(title_text="global training step", row=len(keys), col=1)
    return fig.to_plotly_json()


def skills(model: dict) -> dict:
    """Uses per skill, stacked by verdict: win (improvement), loss (regression or veto), open."""
    import plotly.graph_objects as go

    rows = model["skills"]
    if not rows:
        return {}
    fig = _figure(height=120 + 28 * len(rows), barmode="stack", xaxis_title="uses")
    for key, colour in (("wins", OUTCOME_COLOUR["improvement"]), ("losses", OUTCOME_COLOUR["regression"]),
                        ("open", OUTCOME_COLOUR["insufficient"])):
        fig.add_trace(go.Bar(y=[r["skill"] for r in rows], x=[r[key] for r in rows], name=key, orientation="h",
                             marker_color=colour))
    fig.update_yaxes(autorange="reversed")
    return fig.to_plotly_json()


def all_figures(model: dict) -> dict[str, dict]:
    """Every figure of the page by the id of the element that shows it (empty ones left out)."""
    built = {"tree": tree(model), "path-trend": path_trend(model) if model["path_trend"] else {},
             "deltas": deltas(model), "training": training(model), "skills": skills(model)}
    return {k: v for k, v in built.items() if v}
