"""`evo diff vA vB`: what changed between two versions and what it did.

Three parts: the recipe (unified text diff plus the changed YAML keys, which
is what a reviewer scans first), the harness (per-file line counts under
analyzers/, skills/, trainer_prompts/) and the recorded metrics (Avg@k and its
per-stratum values from `evaluated`, the judged headline) with deltas.
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from evo.errors import ConfigError, VersionError

if TYPE_CHECKING:
    from evo.lineage.store import Lineage

HARNESS_DIRS = ("analyzers/", "skills/", "trainer_prompts/")


def _effective(text: str, source: str) -> dict:
    """The recipe as it trains: defaults filled in (the raw mapping if it does not validate)."""
    from evo.recipe import normalize_recipe
    from evo.yamlio import parse_yaml

    raw = parse_yaml(text, source=source)
    try:
        return normalize_recipe(raw, source=source)
    except ConfigError:
        return raw


def recipe_changes(text_a: str, text_b: str, a: str, b: str) -> list[dict]:
    """Changed keys of the *effective* recipes (`evo.recipe.leaf_diff`, the guard's diff): a key
    one version sets and the other leaves at its default shows the default, not None."""
    from evo.recipe import leaf_diff

    try:
        eff_a = _effective(text_a, f"{a}:recipe.yaml") if text_a else {}
        eff_b = _effective(text_b, f"{b}:recipe.yaml") if text_b else {}
    except ConfigError:
        return []  # the text diff still shows what changed
    return [{"key": key, a: va, b: vb,
             "change": "added" if va is None else "removed" if vb is None else "changed"}
            for key, (va, vb) in sorted(leaf_diff(eff_a, eff_b).items())]


def _numstat(lin: "Lineage", ha: str, hb: str) -> list[dict]:
    out = []
    for line in lin.repo.git.diff("--numstat", "-M", ha, hb).splitlines():
        added, removed, path = line.split("\t", 2)
        out.append({"path": path, "added": None if added == "-" else int(added),
                    "removed": None if removed == "-" else int(removed)})
    return out


def _delta(x: float | None, y: float | None) -> float | None:
    return None if x is None or y is None else y - x


def diff(lin: "Lineage", a: str, b: str) -> dict:
    records = lin.read_all()
    for name in (a, b):
        if name not in records:
            raise lin._unknown(name, list(records))
    ra, rb = records[a], records[b]
    ha, hb = ra.commit, rb.commit

    def recipe_text(version: str) -> str:
        try:
            return lin.file_at(version, "recipe.yaml")
        except VersionError:
            return ""

    text_a, text_b = recipe_text(a), recipe_text(b)
    text_diff = "".join(difflib.unified_diff(text_a.splitlines(keepends=True), text_b.splitlines(keepends=True),
                                             fromfile=f"{a}/recipe.yaml", tofile=f"{b}/recipe.yaml"))
    files = _numstat(lin, ha, hb)
    ev_a, ev_b = ra.last("evaluated") or {}, rb.last("evaluated") or {}
    strata = sorted(set(ev_a.get("per_stratum") or {}) | set(ev_b.get("per_stratum") or {}))
    per_stratum = {}
    for s in strata:
        x, y = (ev_a.get("per_stratum") or {}).get(s), (ev_b.get("per_stratum") or {}).get(s)
        per_stratum[s] = {a: x, b: y, "delta": _delta(x, y)}
    return {
        "a": a,
        "b": b,
        "commits": {a: ha, b: hb},
        "recipe": {"diff": text_diff, "changes": recipe_changes(text_a, text_b, a, b)},
        "harness": [f for f in files if f["path"].startswith(HARNESS_DIRS)],
        "files": files,
        "metrics": {
            "avg_at_k": {a: ev_a.get("avg_at_k"), b: ev_b.get("avg_at_k"),
                         "delta": _delta(ev_a.get("avg_at_k"), ev_b.get("avg_at_k"))},
            "per_stratum": per_stratum,
            "headline": {a: ra.headline, b: rb.headline},
            "outcome": {a: ra.outcome, b: rb.outcome},
        },
    }
