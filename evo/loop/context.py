"""What every phase of a step works with: the workspace, its settings and lineage, and how to talk.

`StepRunner` (evo/loop/step.py) is one; the phase modules take it as `ws`:
`evo.loop.propose` (propose, commit, backtest), `evo.loop.training` (gate,
control, run, replicates, evaluate), `evo.loop.judge`, `evo.loop.record`
(decide, record), `evo.loop.dryrun`. Diagnosis lives here because the
proposal, the control and the judge all diagnose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from evo.loop import versions as V
from evo.resources import resource_dir
from evo.settings import artifact_dir


class StepContext:
    """The workspace at `root` as a step sees it; `lineage` and `settings` are set when the step opens it."""

    def __init__(self, root: Path, *, agent_backend: str | None = None, dry_run: bool = False,
                 say: Callable[[str], None] | None = None, progress: bool = False):
        self.root = Path(root).resolve()
        self.agent_backend = agent_backend
        self.dry_run = dry_run
        self.say = say or (lambda _msg: None)
        self.progress = progress
        self.lineage = None
        self.settings: dict = {}
        self.config = None  # evo.settings.LoopSettings, typed, built with settings

    def open(self) -> None:
        from evo.lineage import Lineage
        from evo.settings import LoopSettings, load_settings

        self.lineage = Lineage.open(self.root)
        self.settings = load_settings(self.root)
        self.config = LoopSettings.of(self.settings)

    def diagnose(self, version: str, recipe: dict, *, out_dir: Path, tree: Path | None = None,
                  run_dir: Path | None = None) -> dict:
        """Diagnose `version`'s run (or `run_dir`) with the analyzers in `tree` (built-ins first)."""
        from evo.harness.diagnose import diagnose

        inputs = V.diagnosis_inputs(self.lineage, self.lineage.read_all(), self.root, self.settings, version, tree=tree)
        tree = inputs.pop("tree")
        return diagnose(run_dir or artifact_dir(self.root, self.settings, version), recipe=recipe,
                        settings=self.settings, analyzer_dirs=[resource_dir("analyzers"), tree / "analyzers"],
                        version=version, out_dir=out_dir, **inputs)

    def diagnose_parent(self, parent: str, recipe: dict, *, tree: Path | None = None,
                         out_dir: Path | None = None) -> dict:
        """Diagnose `parent` with the harness in `tree` (main's by default); returns the diagnosis."""
        out = out_dir or artifact_dir(self.root, self.settings, parent)
        return self.diagnose(parent, recipe, tree=tree or self.root, out_dir=out)

    def diagnosis_ref(self, parent: str, recipe: dict) -> dict:
        """Diagnose the parent; the journal keeps where the diagnosis is, not the diagnosis."""
        diag = self.diagnose_parent(parent, recipe)
        path = artifact_dir(self.root, self.settings, parent) / "diagnosis.json"
        return {"path": str(path), "harness_version": diag.get("harness_version")}
