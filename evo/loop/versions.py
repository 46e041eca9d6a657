"""Read-side helpers the loop needs about versions: parent choice, recipes,
checkpoints and the lineage summaries handed to agents.

Pure functions over lineage records (from `Lineage.read_all()`) and the
artifact folders; no git writes here.
"""

from __future__ import annotations

import json
from pathlib import Path

from evo.errors import VersionError
from evo.recipe import parse_recipe
from evo.settings import artifact_dir

BASE = "base"  # artifact folder of the untrained base model's evaluation (v0's baseline)
LINK_FILE = "link.json"  # a harness-only version's pointer to the checkpoint it reuses


def intervention_kind(created: dict | None) -> str | None:
    """policy | harness | continue of a `created` event's manifest; None for v0 and `evo merge` (a label)."""
    intervention = (created or {}).get("intervention")
    return intervention.get("kind") if isinstance(intervention, dict) else None


def promoted_head(records: dict) -> str:
    """The name of the version main reflects (latest promotion not reverted)."""
    from evo.lineage import Lineage

    head = Lineage.promoted_head(records)
    if head is None:
        raise VersionError("no promoted version in this workspace; promote one with `evo promote vN`")
    return head.name


def frontier(records: dict, exclude: str = "") -> list:
    from evo.lineage import Lineage

    return [rec for rec in Lineage.frontier(records) if rec.name != exclude]


def last_transition(records: dict) -> dict | None:
    """The `judged` event of the most recent *policy* candidate (the last outcome).

    Harness-only revisions are skipped: they re-evaluate the parent's own
    policy, so their `insufficient` says nothing about an intervention, and
    letting it trigger another reflection would revise the harness forever.
    `reflected` says a harness revision has already been judged since that
    verdict: the reflection it called for happened, so it calls for no other.
    """
    def kind(rec) -> str | None:
        return intervention_kind(rec.last("created"))

    candidates = [rec for rec in records.values()
                  if rec.name != "v0" and rec.last("judged") is not None and kind(rec) != "harness"]
    if not candidates:
        return None
    latest = max(candidates, key=lambda rec: rec.number)
    reflected = any(rec.number > latest.number and kind(rec) == "harness" and rec.last("judged") is not None
                    for rec in records.values())
    return {**latest.last("judged"), "version": latest.name, "reflected": reflected}


def schedule_end(records: dict, name: str) -> int:
    """Training steps behind `name`'s policy: where a run continuing from its checkpoint starts its schedule.

    The `trained` event of the version whose checkpoint `name` uses records the
    schedule its run covered; versions trained before schedules were recorded
    read as 0 (their children replay the first prompts, as they always did).
    """
    for source in policy_source(records, name):
        ev = records[source].last("trained") if source in records else None
        if ev is not None:
            schedule = ev.get("schedule") or {}
            return int(schedule.get("offset") or 0) + int(schedule.get("steps") or 0)
    return 0


def policy_source(records: dict, name: str) -> list[str]:
    """`name` and the ancestors whose policy it shares: a harness-only revision trains nothing."""
    chain = [name]
    while True:
        rec = records.get(chain[-1])
        if rec is None or not rec.parents or intervention_kind(rec.last("created")) != "harness" or rec.last("trained"):
            return chain
        chain.append(rec.parents[0])


def continuations(records: dict, name: str) -> list[dict]:
    """What continuing `name`'s own recipe from its checkpoint gave, each time it was measured.

    From the controls trained for its children (`control` events on it) and
    from continue-training children (their progress against it), oldest first;
    a harness-only revision shares its parent's policy, so it shares those too:
    `{via, steps, seeds, run, outcome, delta, ci_low, ci_high, noise_floor, boot_ci_low, boot_ci_high,
    value}` (`seeds`: the training seeds the figure pools; `run`: the first seed's run folder, relative to
    the artifact root).
    """
    from evo.loop.runs import control_events

    out = []
    sharing = policy_source(records, name)  # a harness-only revision's policy is its parent's
    for source in sharing:
        latest: dict[int, dict] = {}  # a schedule measured again with more seeds supersedes its earlier figure
        measured: dict[int, int] = {}
        for ev in sorted(control_events(records.get(source)).values(), key=lambda e: e["time"]):
            if ev.get("continuation"):
                steps = int(ev["steps"])
                measured[steps] = measured.get(steps, 0) + 1  # each seed's figure pools the seeds before it
                latest[steps] = {"via": f"control {ev['key']} of {source}", "steps": steps, "seeds": measured[steps],
                                 "run": ev.get("run"), "time": ev["time"], **_figure_fields(ev["continuation"])}
        out += latest.values()
    for rec in records.values():
        created = rec.last("created") or {}
        judged = rec.last("judged") or {}
        if list(rec.parents)[:1] and rec.parents[0] in sharing and judged \
                and intervention_kind(created) == "continue":
            figure = judged.get("progress") or judged
            schedule = (rec.last("trained") or {}).get("schedule") or {}
            out.append({"via": rec.name, "steps": schedule.get("steps") or (created.get("intervention") or {}).get("steps"),
                        "seeds": int(judged.get("seeds") or 1), "run": rec.name, "time": judged["time"],
                        **_figure_fields(figure)})
    return sorted(out, key=lambda c: c["time"])


COLLAPSE_AUDIT = "collapse"  # analyzers/audit_collapse.py's audit name


def collapse_vetoes(records: dict, name: str) -> list[dict]:
    """The collapse audit's vetoes on the policy `name` holds: on its `judged` event, its own and those it
    inherited, and on those of the versions whose policy it shares (a harness-only revision trains nothing, and
    its own evaluation cannot see the training signal its policy lost)."""
    out = []
    for source in policy_source(records, name):
        judged = _judged(records, source) or {}
        out += [v for v in (judged.get("vetoes") or []) + (judged.get("inherited_vetoes") or [])
                if v.get("audit") == COLLAPSE_AUDIT]
    return out


def collapse_veto(records: dict, name: str) -> dict | None:
    """The first collapse veto on the policy `name` holds (`collapse_vetoes`), or None.

    Continuing a collapsed policy unchanged measures nothing (`evo.loop.propose`).
    """
    return next(iter(collapse_vetoes(records, name)), None)


def harmed_by_training(records: dict, name: str) -> bool:
    """Whether the training behind `name`'s policy left one no child should start from: the collapse audit vetoed
    it (`collapse_vetoes`), or the verdict of the version that trained it is a regression (v0's is against the
    untrained base model: its weights are measurably worse than the ones it started from).
    `evo.loop.training.repair_start` walks past such a policy."""
    trainer = policy_source(records, name)[-1]
    return bool(collapse_vetoes(records, name)) or (_judged(records, trainer) or {}).get("outcome") == "regression"


def _judged(records: dict, name: str) -> dict | None:
    record = records.get(name)
    return record.last("judged") if record is not None else None


def is_confounded(rec) -> bool:
    """Whether `rec`'s verdict credits it with the gain of its extra training steps.

    New verdicts say so themselves (`search.control: none`); verdicts judged
    before attribution existed (no `schema` 2) compared a trained candidate with
    its parent only, so they are confounded unless nothing was trained.
    """
    judged = rec.last("judged")
    if judged is None:
        return False
    if judged.get("schema", 1) >= 2:
        return bool(judged.get("confounded"))
    return bool(rec.parents) and intervention_kind(rec.last("created")) != "harness"


def _figure_fields(figure: dict) -> dict:
    h = figure.get("headline") or {}
    keys = ("value", "delta", "ci_low", "ci_high", "noise_floor", "boot_ci_low", "boot_ci_high")
    return {"outcome": figure.get("outcome"), **{k: h.get(k) for k in keys}}


def lineage_summaries(records: dict) -> list[dict]:
    """One dict per version (oldest first), as agents and analyzers see the lineage.

    `outcome` / `headline` are the attributed verdict; `progress` the comparison
    with the parent (None for verdicts judged before attribution, which compared
    with the parent only and are marked `confounded`); `continuations` what
    training the version's own recipe further gave (see `continuations`).
    """
    out = []
    for rec in sorted(records.values(), key=lambda r: r.number):
        judged = rec.last("judged") or {}
        created = rec.last("created") or {}
        attributed = judged.get("attributed") or {}
        out.append(
            {
                "name": rec.name,
                "parents": list(rec.parents),
                "state": rec.state,
                "intervention": created.get("intervention"),
                "harness_revision": created.get("harness_revision"),
                "outcome": judged.get("outcome"),
                "headline": judged.get("headline"),
                "against": attributed.get("against") or judged.get("baseline"),
                "progress": judged.get("progress"),
                "confounded": is_confounded(rec),
                "continuations": continuations(records, rec.name),
            }
        )
    return out


def diagnosis_inputs(lineage, records: dict, root: Path, settings: dict, version: str, *,
                     tree: Path | None = None) -> dict:
    """What `evo.harness.diagnose` needs to know about `version` besides its own run.

    Its parent's and the promoted head's runs (where evaluated), the paths it
    changes, whether it declared a harness revision (the tampering audit lets
    those touch analyzers), the lineage, and the tree whose `analyzers/` to use:
    `tree` if given, else the version's worktree while it exists, else the
    workspace checkout. `evo step` and `evo analyze` both call this, so a
    version is always diagnosed the same way.
    """
    rec = records.get(version)
    parents = list(rec.parents) if rec is not None else []
    parent = parents[0] if parents else (BASE if version != BASE else None)
    head = promoted_head(records) if any(r.state == "promoted" for r in records.values()) else None
    created = (rec.last("created") if rec is not None else None) or {}
    declared = bool(created.get("harness_revision")) or intervention_kind(created) == "harness"

    def evaluated(name: str | None) -> Path | None:
        folder = artifact_dir(root, settings, name) if name else None
        return folder if folder is not None and (folder / "eval.parquet").exists() else None

    if tree is None:
        worktree = lineage.worktree_path(version)
        tree = worktree if parents and (worktree / "analyzers").is_dir() else Path(root)
    return {
        "parent_run_dir": evaluated(parent),
        "promoted_run_dir": evaluated(head) if head != version else None,
        "changed_paths": lineage.changed_paths(version) if parents else [],
        "declared_harness_revision": declared,
        "lineage": lineage_summaries(records),
        "tree": Path(tree),
    }


def recipe_of(lineage, version: str) -> dict:
    return parse_recipe(lineage.file_at(version, "recipe.yaml"), source=f"{version}:recipe.yaml")


def is_evaluated(root: Path, settings: dict, version: str) -> bool:
    return (artifact_dir(root, settings, version) / "eval.json").exists()


def checkpoint_of(root: Path, settings: dict, version: str) -> str:
    """The checkpoint a version's policy lives in (following harness-only links).

    A missing checkpoint is an error, never a silent restart from the base model.
    """
    seen = set()
    current = version
    while current not in seen:
        seen.add(current)
        folder = artifact_dir(root, settings, current)
        ckpt = folder / "checkpoint"
        if (ckpt / "config.json").exists():
            return str(ckpt)
        link = folder / LINK_FILE
        if link.exists():
            current = json.loads(link.read_text())["version"]
            continue
        break
    raise VersionError(f"{version} has no checkpoint under {artifact_dir(root, settings, version)} "
                       "(artifacts deleted or moved?); restore them or set artifacts.root in evo.yaml")


def write_link(root: Path, settings: dict, version: str, source: str) -> None:
    """Record that `version` (a harness-only revision) reuses `source`'s policy."""
    folder = artifact_dir(root, settings, version)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LINK_FILE).write_text(json.dumps({"version": source}, indent=2))
