"""`evo plot vN` and `evo report --png DIR`: PNG files a reviewer opens, checked against their data.

The training picture marks the version's own steps in a colour used nowhere
else, one marker per logged step and panel, so counting that colour's blobs
in the decoded image must give panels x lines of metrics.jsonl.
"""

from __future__ import annotations

import numpy as np
from PIL import Image
from report_support import evo, evo_json
from scipy import ndimage

from evo.report.plots import OWN_COLOUR, SIZE
from evo.report.runs import TRAINING_KEYS, read_metrics
from evo.settings import artifact_dir, load_settings


def _blobs(png, colour: str, tolerance: int = 40, min_pixels: int = 12) -> int:
    """Connected regions of `colour` in the image (8-connected, specks below min_pixels ignored)."""
    rgb = np.asarray(Image.open(png).convert("RGB")).astype(int)  # (H, W, 3)
    target = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    mask = (np.abs(rgb - target) <= tolerance).all(axis=2)  # (H, W)
    labels, n = ndimage.label(mask, structure=np.ones((3, 3)))
    sizes = np.bincount(labels.ravel())[1:]
    return int((sizes >= min_pixels).sum())


def test_evo_plot_writes_pngs_of_the_expected_size_that_match_the_logged_steps(workspace_copy):
    root = workspace_copy
    rows = evo_json("log", "-C", root)["versions"]
    settings = load_settings(root)
    version = next(r["name"] for r in rows if r["parents"] and read_metrics(artifact_dir(root, settings, r["name"])))
    out = evo_json("plot", "-C", root, version)
    names = sorted(p.rsplit("/", 1)[1] for p in out["pngs"])
    assert names == ["avg_at_k.png", "lineage.png", "training.png"]
    for path in out["pngs"]:
        with Image.open(path) as im:
            assert im.format == "PNG" and im.size == SIZE == tuple(out["size"])
            im.load()  # decodes the whole file: not truncated
    metrics = read_metrics(artifact_dir(root, settings, version))
    panels = sum(1 for k in TRAINING_KEYS if any(k in m for m in metrics))
    training = next(p for p in out["pngs"] if p.endswith("training.png"))
    assert _blobs(training, OWN_COLOUR) == panels * len(metrics)

    listed = evo("pr", "-C", root, version).stdout
    section = listed.split("### Plots", 1)[1]
    for name in names:
        assert f".evo/artifacts/{version}/plots/{name}" in section


def test_the_blob_count_would_catch_a_missing_step(workspace_copy):
    """The image check is not vacuous: a version with one step fewer logged draws fewer markers."""
    root = workspace_copy
    settings = load_settings(root)
    rows = evo_json("log", "-C", root)["versions"]
    version = next(r["name"] for r in rows if r["parents"] and read_metrics(artifact_dir(root, settings, r["name"])))
    run = artifact_dir(root, settings, version)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    (run / "summary.json").unlink(missing_ok=True)
    out = evo_json("plot", "-C", root, version)
    panels = sum(1 for k in TRAINING_KEYS if k in lines[0])
    training = next(p for p in out["pngs"] if p.endswith("training.png"))
    assert _blobs(training, OWN_COLOUR) == panels * (len(lines) - 1)


def test_report_png_writes_the_workspace_pictures(workspace, tmp_path):
    out = evo_json("report", "-C", workspace["root"], "--out", tmp_path / "r.html", "--png", tmp_path / "png")
    assert sorted(p.rsplit("/", 1)[1] for p in out["pngs"]) == ["avg_at_k.png", "deltas.png", "lineage.png", "training.png"]
    for path in out["pngs"]:
        with Image.open(path) as im:
            assert im.size == SIZE


def test_plot_of_an_unknown_version_is_one_line(workspace):
    proc = evo("plot", "-C", workspace["root"], "v99", check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "unknown version 'v99'" in proc.stderr, proc.stderr


def test_plot_rejects_a_name_that_is_not_a_version(workspace):
    proc = evo("plot", "-C", workspace["root"], "nope", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "'nope'" in proc.stderr, proc.stderr
