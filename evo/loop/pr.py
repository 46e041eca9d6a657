"""Review a version as a pull request: the markdown body, and `gh pr create`.

The body carries what a reviewer needs to accept or refuse the version:
the parent's diagnosis, the intervention and its hypothesis, the backtest
prediction, the outcome with its interval, the audits, and the diff stat.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from evo.errors import EvoError, VersionError
from evo.settings import artifact_dir, plots_dir
from evo.vocabulary import Headline


def _fmt_interval(h: dict) -> str:
    return Headline.from_dict(h).markdown()


def _outcome_lines(judged: dict, parent: str | None, rec) -> list[str]:
    """The attributed verdict (which decides), progress against the parent, and what the figures rest on."""
    from evo.loop.versions import is_confounded

    if not judged:
        return ["- class: **pending**"]
    attributed = judged.get("attributed") or {}
    against = attributed.get("against") or judged.get("baseline") or parent or "-"
    what = (f"its counterfactual control `{attributed.get('control')}` (the parent's recipe continued under the same "
            "schedule and seeds)" if against == "control" else f"`{against}`")
    lines = [f"- class: **{judged['outcome']}** against {what} — this decides",
             f"- headline: {_fmt_interval(judged.get('headline') or {})}"]
    progress = judged.get("progress") or {}
    if progress and progress.get("against") != against:
        lines.append(f"- progress vs `{progress['against']}`: **{progress['outcome']}**, {_fmt_interval(progress.get('headline') or {})}")
    if is_confounded(rec):
        lines.append("- **confounded**: compared with the parent only, so the delta includes whatever the extra "
                     "training steps alone would have given (`search.control: none`, or judged before attribution)")
    noise = judged.get("noise") or {}
    if noise.get("sigma") is not None:
        lines.append(f"- seed noise: Avg@k sigma {noise['sigma']:.4f} between training seeds ({noise.get('runs')} runs); "
                     f"{judged.get('seeds', 1)} seed(s) behind this version's score")
    lines += [f"- {reason}" for reason in judged.get("reasons", []) or []]
    return lines


def _evidence(evidence) -> str:
    """Finding ids and metric values a manifest cites (a dict, or a plain list of ids)."""
    if isinstance(evidence, dict):
        parts = [f"`{f}`" for f in evidence.get("findings", []) or []]
        parts += [f"`{k}` = {v:.4g}" if isinstance(v, (int, float)) else f"`{k}` = {v}"
                  for k, v in (evidence.get("metrics") or {}).items()]
        return ", ".join(parts) or "-"
    return ", ".join(f"`{e}`" for e in evidence or []) or "-"


def pr_body(lineage, root: Path, settings: dict, version: str) -> dict:
    """Return {title, body, branch, base} for version's pull request."""
    records = lineage.read_all()
    if version not in records:
        raise VersionError(f"unknown version {version!r}; `evo log` lists the versions")
    rec = records[version]
    created = rec.last("created") or {}
    manifest = created.get("intervention") or {}
    if isinstance(manifest, str):  # `evo merge` records a label ("merge of v1 and v3"), not a manifest
        manifest = {"factor": manifest}
    harness = created.get("harness_revision")
    judged = rec.last("judged") or {}
    backtested = rec.last("backtested")
    parent = rec.parents[0] if rec.parents else None

    lines = [f"## {version}: {manifest.get('factor', 'baseline')}", ""]
    lines += [f"- parent: `{parent or '-'}` · state: **{rec.state}** · agent: {created.get('agent', '-')}"]
    if manifest.get("kind"):
        lines += [
            f"- kind: {manifest.get('kind')} · change: {manifest.get('change', '-')}"
            + (f" · skill: `{manifest['skill']}`" if manifest.get("skill") else ""),
            "",
            "### Hypothesis",
            manifest.get("hypothesis", "-"),
            "",
            f"**Predicted effect:** {manifest.get('predicted_effect', '-')}",
            f"**Evidence cited:** {_evidence(manifest.get('evidence'))}",
        ]
    if harness:
        lines += ["", "### Harness revision", f"{harness.get('factor')}: {harness.get('change', '')} — {harness.get('hypothesis', '')}"]
    if parent:
        diag_md = artifact_dir(root, settings, parent) / "diagnosis.md"
        if diag_md.exists():
            lines += ["", f"### Diagnosis of {parent}", "", diag_md.read_text().strip()]
    lines += ["", "### Backtest", (backtested or {}).get("message") or "no backtest (not a reward or filter change)"]
    lines += ["", "### Outcome"] + _outcome_lines(judged, parent, rec)
    vetoes = judged.get("vetoes") or []
    lines += ["", "### Audits", "no veto" if judged and not vetoes else ("pending" if not judged else "")]
    for v in vetoes:
        lines.append(f"- **VETO** `{v.get('audit')}`: {v.get('message')}")
    for v in (judged or {}).get("inherited_vetoes") or []:
        lines.append(f"- a kind {parent} already had (recorded, does not decide) `{v.get('audit')}`: {v.get('message')}")
    pngs = sorted(plots_dir(root, settings, version).glob("*.png"))
    lines += ["", "### Plots"] + ([f"- `{p.relative_to(root) if p.is_relative_to(root) else p}`" for p in pngs]
                                  or [f"none yet; `evo plot {version}` draws them"])
    if parent:
        diff = lineage.diff(parent, version)
        stat = "\n".join(f"{f['path']} | +{f.get('added', '?')} -{f.get('removed', '?')}" for f in diff["files"])
        lines += ["", "### Diff", "```", stat or "(no file changes)", "```"]
        if diff["recipe"]["diff"]:
            lines += ["", "```diff", diff["recipe"]["diff"].strip(), "```"]
    title = f"{version}: {manifest.get('factor', 'baseline')}" + (f" [{judged['outcome']}]" if judged.get("outcome") else "")
    return {"version": version, "title": title, "body": "\n".join(lines) + "\n", "branch": f"evo/{version}", "base": "main"}


def open_pr(lineage, pr: dict, root: Path) -> str:
    """Push the version branch and its notes, then `gh pr create`. Returns the PR URL."""
    if shutil.which("gh") is None:
        raise EvoError("the `gh` CLI is not installed; install GitHub CLI or paste the body printed by `evo pr` into a PR")
    if not lineage.has_remote():
        raise EvoError("this workspace has no git remote; add one (`git remote add origin URL`) to open pull requests")
    lineage.push_version(pr["version"])
    proc = subprocess.run(
        ["gh", "pr", "create", "--base", pr["base"], "--head", pr["branch"], "--title", pr["title"], "--body", pr["body"]],
        cwd=root, capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise EvoError(f"gh pr create failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1] if (proc.stderr or proc.stdout).strip() else 'exit ' + str(proc.returncode)}")
    return proc.stdout.strip()


def pr_json(pr: dict) -> str:
    return json.dumps(pr, indent=2)
