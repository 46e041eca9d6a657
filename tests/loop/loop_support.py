"""Helpers for loop tests: real workspaces, real git, real (test-scale) training.

Training is the expensive part, so one workspace is initialised and stepped
once per session; tests that only read it, or extend it, work on copies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

EVO = str(Path(sys.executable).with_name("evo"))

# The embedded default at test scale: the same plain baseline (binary
# correctness, a generation limit too short for the hard stratum, no filters),
# trained for fewer, smaller steps so a whole step takes seconds. The learning
# rate is low so that, at this scale, a version's score moves mostly with its
# intervention rather than with three more steps of training: unlocking the
# hard stratum is a clear improvement, weaker interventions are `insufficient`.
FAST_RECIPE = """\
name: arithmetic-test-baseline
seed: 0
domain: {name: arithmetic}
model: {name: builtin:tiny-char}
rollout: {prompts_per_step: 8, num_generations: 4, max_new_tokens: 4}
grpo: {steps: 3, learning_rate: 0.0001}
reward:
  terms: [{name: correctness, weight: 1.0}]
eval: {k: 4, seed: 42, max_tasks: 48}
"""


def evo(*args, cwd=None, env=None, check=True):
    """Run the real `evo` command; returns the CompletedProcess."""
    proc = subprocess.run([EVO, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"evo {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def evo_json(*args, cwd=None):
    return json.loads(evo(*args, "--json", cwd=cwd).stdout)


# A workspace that keeps one alternative beside its promoted head.
FAST_SETTINGS = {"search": {"frontier_size": 1}}


def init_workspace(path: Path, recipe_text: str = FAST_RECIPE, settings_patch: dict | None = None) -> Path:
    recipe = path.parent / f"{path.name}-recipe.yaml"
    recipe.write_text(recipe_text)
    evo("init", path, "--recipe", recipe)
    if settings_patch:
        patch_settings(path, settings_patch)
    return path


def patch_settings(root: Path, patch: dict) -> None:
    """Update sections of evo.yaml and commit it on main, as a user would."""
    import yaml

    settings = yaml.safe_load((root / "evo.yaml").read_text())
    for key, value in patch.items():
        if isinstance(value, dict):
            settings.setdefault(key, {}).update(value)
        else:
            settings[key] = value
    (root / "evo.yaml").write_text(yaml.safe_dump(settings, sort_keys=False))
    subprocess.run(["git", "commit", "-qam", "settings for this test"], cwd=root, check=True)


def lineage_fingerprint(root: Path) -> dict:
    """What must be identical between an interrupted-and-resumed run and an uninterrupted one."""
    data = evo_json("log", "-C", root)
    versions = data["versions"] if isinstance(data, dict) else data
    out = {}
    for v in versions:
        shown = evo_json("show", "-C", root, v["name"])
        events = shown["events"]
        out[v["name"]] = {
            "state": v["state"],
            "parents": v["parents"],
            "events": sorted(e["event"] for e in events),
            # deterministic ids; a commit a transition names (`v1:promoted:<sha>`) differs between runs by its time
            "ids": sorted(re.sub(r":[0-9a-f]{12}$", ":<commit>", e["id"]) for e in events if ":" in e["id"]),
            "outcome": shown.get("outcome"),
            "headline": round((shown.get("headline") or {}).get("value") or -1.0, 9),
        }
    return out


def copy_workspace(src: Path, dst: Path) -> Path:
    """Copy a workspace with no live worktrees (every finished step removes its own)."""
    shutil.copytree(src, dst, symlinks=True)
    return dst


