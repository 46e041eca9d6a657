"""How `evo report` scales: 1,000 versions, timed against `evo log --json` on the same workspace.

Builds a real workspace with `bench/lineage_scale.py`'s builder (branches,
~30% pruned, promotion tags, seven lineage events per version), then gives
every version the artifacts a trained version has: metrics.jsonl (20 steps of
the namespaced keys), summary.json, eval.json, eval.parquet (200 tasks x 8
samples over three strata) and a diagnosis.json with eight findings. Then it
times the real command in a fresh process (startup included),

  * `evo report --json --out FILE`: read lineage and artifacts, build the
    figures, write the self-contained page (Plotly's bundle inlined), and
  * the peer: `evo log --json`, the same lineage read with nothing rendered,

and measures the page's size. Goals: under 5 s and under 10 MB. Ends with one
JSON line.

    python bench/report_scale.py [--versions 1000] [--repeats 3] [--dir PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lineage_scale import EVO, build, time_cmd  # noqa: E402

GOAL_S = 5.0
GOAL_MB = 10.0
STEPS = 20
KEYS = ("reward/mean", "reward/std", "signal/dead_group_ratio", "signal/kept_frac", "gen/truncated_frac",
        "gen/length_mean", "policy/kl", "policy/entropy", "policy/clip_frac_low", "policy/clip_frac_high",
        "policy/loss", "policy/grad_norm", "time/step_s")


def write_artifacts(root: Path, n: int, seed: int = 0) -> None:
    """Artifacts of a trained version for v0..vN under the default artifact root."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    tasks = [(f"t{s}-{i:03d}", s) for s in ("easy", "medium", "hard") for i in range(67)][:200]
    base = root / ".evo" / "artifacts"
    for i in range(n + 1):
        run = base / f"v{i}"
        run.mkdir(parents=True, exist_ok=True)
        rows = [{"step": s, **{k: rng.random() for k in KEYS}} for s in range(STEPS)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        avg = rng.uniform(0.2, 0.8)
        ev = {"avg_at_k": avg, "k": 8, "seed": 42, "n_tasks": len(tasks), "pass_at_k": min(1.0, avg + 0.2),
              "per_stratum": {"easy": avg, "medium": avg * 0.8, "hard": avg * 0.5}}
        (run / "eval.json").write_text(json.dumps(ev))
        (run / "summary.json").write_text(json.dumps({"steps": STEPS, "tokens_generated": 120000, "tokens_trained": 120000,
                                                     "wall_s": 60.0, "final": rows[-1], "eval": ev}))
        scores = [float(rng.random() < avg) for _ in tasks for _ in range(8)]
        pq.write_table(pa.table({"task_id": [t for t, _ in tasks for _ in range(8)],
                                 "stratum": [s for _, s in tasks for _ in range(8)],
                                 "sample": [j for _ in tasks for j in range(8)], "score": scores}), run / "eval.parquet")
        findings = [{"id": f"signal.finding_{j}", "layer": ("score", "signal", "behavior", "version")[j % 4],
                     "severity": ("info", "warning", "critical")[j % 3],
                     "message": f"finding {j} of v{i}: a sentence of the length analyzers write, with a number {rng.random():.3f}",
                     "evidence": {"rows": [f"s{j}-g0-{k}" for k in range(10)], "values": {"x": rng.random()}}}
                    for j in range(8)]
        (run / "diagnosis.json").write_text(json.dumps({
            "version": f"v{i}", "harness_version": "0123456789ab", "metrics": {k: rng.random() for k in KEYS},
            "findings": findings, "analyzers": [], "audits": {"vetoed": False, "vetoes": [], "ran": ["leakage"], "failed": []}}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="where to build (default: a temporary folder, removed)")
    args = ap.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="evo-report-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    try:
        from evo.workspace import init_workspace

        root = init_workspace(base / "large")
        t = time.perf_counter()
        counts = build(root, args.versions)
        write_artifacts(root, args.versions)
        print(f"built {counts['versions']} versions ({counts['events']} events) with artifacts in "
              f"{time.perf_counter() - t:.1f} s", file=sys.stderr)
        page = base / "report.html"
        report_s, out = time_cmd(EVO + ["report", "--json", "-C", str(root), "--out", str(page)], root, args.repeats)
        written = json.loads(out)
        log_s, _ = time_cmd(EVO + ["log", "--json", "-C", str(root)], root, args.repeats)
        page_mb = page.stat().st_size / 1e6
        print(f"evo report: {report_s:.2f} s for {written['versions']} versions, page {page_mb:.2f} MB; "
              f"evo log --json: {log_s:.2f} s (ratio {report_s / log_s:.1f}x)", file=sys.stderr)
        result = {
            "versions_built": args.versions,
            "versions_in_page": written["versions"],
            "events": counts["events"],
            "report_s": round(report_s, 3),
            "evo_log_json_s": round(log_s, 3),
            "ratio_vs_evo_log": round(report_s / log_s, 2) if log_s else None,
            "page_mb": round(page_mb, 2),
            "goal_report_s": GOAL_S,
            "goal_page_mb": GOAL_MB,
            "met": report_s < GOAL_S and page_mb < GOAL_MB,
        }
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
