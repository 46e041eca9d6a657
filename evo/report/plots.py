"""PNG pictures for reviews (`evo plot vN`, `evo report --png DIR`), drawn with matplotlib.

Every picture is SIZE pixels (FIGSIZE inches at DPI, no tight cropping), so a
PR or CI page lays them out predictably. A version's own training steps are
drawn as OWN_COLOUR markers over a grey line, one marker per logged step
(strided past MARKER_LIMIT steps), its ancestors' steps in grey: the picture
can be checked against metrics.jsonl point for point. Figures are built on
the object API with the Agg canvas (no pyplot state, no display needed).
"""

from __future__ import annotations

from pathlib import Path

from evo.report.figures import MERGE_COLOUR, OUTCOME_COLOUR, PATH_COLOUR, STATE_STYLE
from evo.settings import PLOTS_DIR, plots_dir  # noqa: F401 - where a version's PNGs live

FIGSIZE = (12.0, 8.0)
DPI = 100
SIZE = (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))  # (width, height) in pixels
OWN_COLOUR = "#d81b60"  # markers of the plotted version's own steps; used nowhere else in the pictures
LINE_COLOUR = "#90a4ae"
MARKER_LIMIT = 60  # steps per version drawn as markers; beyond, the line alone


def _figure(rows: int = 1, cols: int = 1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png")
    return path


def ancestry(model: dict, version: str) -> list[dict]:
    """The first-parent chain from v0 to `version`, as model entries."""
    by_name = {v["name"]: v for v in model["versions"]}
    chain, name = [], version
    while name in by_name and all(c["name"] != name for c in chain):
        chain.append(by_name[name])
        name = by_name[name]["parents"][0] if by_name[name]["parents"] else None
    return chain[::-1]


def training_png(model: dict, chain: list[dict], path: Path, own: str | None) -> Path | None:
    """One panel per training metric over global steps along `chain`; `own`'s steps as OWN_COLOUR markers."""
    keys = [k for k in model["training_keys"] if any(k in v["training"]["series"] for v in chain)]
    if not keys:
        return None
    cols = 2
    rows = -(-len(keys) // cols)
    fig, axes = _figure(rows, cols)
    for i, ax in enumerate(axes.flat):
        if i >= len(keys):
            ax.set_visible(False)
            continue
        key = keys[i]
        for v in chain:
            s = v["training"]["series"]
            if key not in s:
                continue
            mine = v["name"] == own
            ax.plot(s["step"], s[key], color=LINE_COLOUR if mine else "#cfd8dc", linewidth=1.5, zorder=1)
            if len(s["step"]) <= MARKER_LIMIT:
                ax.plot(s["step"], s[key], linestyle="none", marker="o", markersize=7 if mine else 3,
                        color=OWN_COLOUR if mine else "#9e9e9e", zorder=2)
            if v is not chain[0]:
                ax.axvline(v["training"]["global_offset"] - 0.5, color="#eceff1", linewidth=1, zorder=0)
        ax.set_title(key, fontsize=10)
        ax.tick_params(labelsize=8)
    title = " → ".join(v["name"] for v in chain)
    fig.suptitle(f"training along {title}" + (f" ({own}'s steps marked)" if own else ""), fontsize=11)
    fig.supxlabel("global training step", fontsize=9)
    return _save(fig, path)


def avg_at_k_png(points: list[dict], path: Path, title: str) -> Path | None:
    """Avg@k with its 95% interval at each point of a path, and each stratum's."""
    if not points:
        return None
    fig, axes = _figure()
    ax = axes[0, 0]
    xs = list(range(len(points)))

    def bars(items):
        low = [p["value"] - p["ci_low"] if "ci_low" in p else 0 for p in items]
        high = [p["ci_high"] - p["value"] if "ci_high" in p else 0 for p in items]
        return [low, high]

    items = [{**p, "value": p["avg_at_k"]} for p in points]
    ax.errorbar(xs, [p["value"] for p in items], yerr=bars(items), color="#263238", linewidth=2.5, marker="o",
                capsize=4, label="Avg@k", zorder=3)
    for s in sorted({s for p in points for s in p["per_stratum"]}):
        sx = [i for i, p in enumerate(points) if s in p["per_stratum"]]
        si = [points[i]["per_stratum"][s] for i in sx]
        ax.errorbar([x + 0.04 for x in sx], [p["value"] for p in si], yerr=bars(si), linestyle=":", marker=".", capsize=2,
                    label=s, alpha=0.8)
    ax.set_xticks(xs, [p["version"] for p in points], fontsize=9)
    ax.set_ylabel("Avg@k")
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _save(fig, path)


def lineage_png(model: dict, path: Path, highlight: str | None = None) -> Path:
    """The lineage DAG: the same layout, colours and symbols as the page's tree."""
    fig, axes = _figure()
    ax = axes[0, 0]
    for e in model["edges"]:
        style = ((MERGE_COLOUR, 1.5, "--") if e["kind"] == "merge" else
                 (PATH_COLOUR, 3.5, "-") if e["on_path"] else ("#b0bec5", 1.2, "-"))
        ax.plot([x for x, _ in e["points"]], [y for _, y in e["points"]], color=style[0], linewidth=style[1],
                linestyle=style[2], zorder=1)
    many = len(model["versions"]) > 80
    for v in model["versions"]:
        colour, _, marker = STATE_STYLE.get(v["state"], STATE_STYLE["frontier"])
        filled = marker not in ("x", "+")
        ax.scatter([v["x"]], [v["lane"]], s=30 if many else 160, c=colour, marker=marker, zorder=3,
                   edgecolors=(PATH_COLOUR if v["on_path"] else "white") if filled else None,
                   linewidths=(2.5 if v["on_path"] else 1) if filled else 2.5)
        if v["name"] == highlight:
            ax.scatter([v["x"]], [v["lane"]], s=700, facecolors="none", edgecolors="#000000", linewidths=2, zorder=4)
        if not many:
            ax.annotate(f"{v['name']}\n{v['outcome'] or v['state']}", (v["x"], v["lane"]), textcoords="offset points",
                        xytext=(0, 11), ha="center", fontsize=8)
    lanes = max((v["lane"] for v in model["versions"]), default=0)
    ax.set_ylim(lanes + 0.7, -0.9)
    ax.set_xlabel("version")
    ax.set_ylabel("lane (0 = promoted path)")
    ax.set_title(f"lineage of {model['workspace']['name']}: {len(model['versions'])} versions", fontsize=11)
    ax.set_yticks(range(lanes + 1))
    handles = [ax.scatter([], [], c=c, marker=m, label=state) for state, (c, _, m) in STATE_STYLE.items()]
    ax.legend(handles=handles, fontsize=8, loc="lower right")
    return _save(fig, path)


def deltas_png(model: dict, path: Path) -> Path | None:
    """Each judged version's Δ with its interval, vs parent (circles) and vs control (diamonds)."""
    judged = [v for v in model["versions"] if v["comparisons"]]
    if not judged:
        return None
    fig, axes = _figure()
    ax = axes[0, 0]
    index = {v["name"]: i for i, v in enumerate(judged)}
    for key, marker, shift in (("vs_parent", "o", -0.12), ("vs_control", "D", 0.12)):
        for v in judged:
            c = v["comparisons"].get(key)
            if not c or c.get("delta") is None:
                continue
            low, high = c.get("ci_low", c["delta"]), c.get("ci_high", c["delta"])
            ax.errorbar([index[v["name"]] + shift], [c["delta"]], yerr=[[c["delta"] - low], [high - c["delta"]]],
                        marker=marker, color=OUTCOME_COLOUR.get(c.get("outcome"), "#455a64"), capsize=3)
    ax.axhline(0, color="#90a4ae", linewidth=1)
    ax.set_xticks(range(len(judged)), [v["name"] for v in judged], fontsize=8, rotation=90 if len(judged) > 30 else 0)
    ax.set_ylabel("Δ headline (circles: vs parent, diamonds: vs control)")
    ax.set_title("each version's Δ with its 95% interval; colour = outcome", fontsize=11)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def write_version_plots(root, version: str, out_dir=None, *, settings: dict | None = None, model: dict | None = None) -> list[Path]:
    """`evo plot vN`: training curves, Avg@k along vN's ancestry, and the lineage with vN ringed."""
    from evo.errors import VersionError
    from evo.report.data import gather, path_trend
    from evo.settings import load_settings

    settings = settings or load_settings(root)
    model = model or gather(root, settings, pr_bodies=0)
    if version not in {v["name"] for v in model["versions"]}:
        known = ", ".join(v["name"] for v in model["versions"][-8:])
        raise VersionError(f"unknown version {version!r} (known: {known}); see `evo log`")
    out = Path(out_dir) if out_dir else plots_dir(model["workspace"]["root"], settings, version)
    chain = ancestry(model, version)
    by_name = {v["name"]: v for v in model["versions"]}
    points = path_trend(Path(model["workspace"]["root"]), settings, [v["name"] for v in chain], by_name)
    written = [training_png(model, chain, out / "training.png", version),
               avg_at_k_png(points, out / "avg_at_k.png", f"Avg@k along {version}'s ancestry (95% interval)"),
               lineage_png(model, out / "lineage.png", highlight=version)]
    return [p for p in written if p]


def write_workspace_plots(model: dict, out_dir) -> list[Path]:
    """`evo report --png DIR`: the lineage, Avg@k along the promoted path, Δ per version, path training curves."""
    out = Path(out_dir)
    by_name = {v["name"]: v for v in model["versions"]}
    path = [by_name[n] for n in model["promoted_path"]]
    written = [lineage_png(model, out / "lineage.png"),
               avg_at_k_png(model["path_trend"], out / "avg_at_k.png", "Avg@k along the promoted path (95% interval)"),
               deltas_png(model, out / "deltas.png"),
               training_png(model, path, out / "training.png", None)]
    return [p for p in written if p]
