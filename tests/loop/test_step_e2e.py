"""`evo step` end to end: subprocesses, real git, real tiny training.

- one step bootstraps v0 and proposes, trains, judges and records v1;
- a step killed (SIGKILL) at each phase in turn and resumed ends with the same
  lineage as an uninterrupted step: same versions, one note event each;
- three steps record promotions and one decision per judged candidate, update
  memory and skill usage, and log every version's outcome class with its interval.
"""

from __future__ import annotations

import subprocess
from collections import Counter

from loop_support import FAST_SETTINGS, copy_workspace, evo, evo_json, init_workspace, lineage_fingerprint

# Every phase of a first step (the v1 transition; the bootstrap of v0 runs the
# same gate/run/evaluate/judge code under its own journal, so three of its phases
# stand for it), killed as the phase starts, plus kills inside phases between a
# git write (or a finished control run) and its record (":mid").
KILL_SEQUENCE = [
    "evaluate-base", "run", "replicates",  # bootstrap of v0 (replicates: the noise-floor calibration)
    "diagnose", "propose", "commit:mid", "backtest", "gate", "control", "control:mid", "run", "evaluate", "judge",
    "decide:mid", "record:mid",
]


def test_first_step_bootstraps_v0_and_records_v1(stepped):
    out = stepped["stdout"]
    assert "--- evo step summary ---" in out
    for key in ("version: v1", "parent: v0", "intervention:", "outcome:", "headline: score/avg_at_k", "decision:"):
        assert key in out, out
    fp = stepped["fingerprint"]
    assert set(fp) == {"v0", "v1"}
    assert fp["v0"]["state"] == "promoted" and fp["v1"]["parents"] == ["v0"]
    for name in ("v0", "v1"):
        counts = Counter(fp[name]["events"])
        assert counts["judged"] == 1 and counts["evaluated"] == 1 and counts["trained"] == 1, (name, counts)
    # The baseline's generation limit truncates the hard stratum: the diagnosis finds it.
    shown = evo_json("show", "-C", stepped["root"], "v1")
    created = next(e for e in shown["events"] if e["event"] == "created")
    assert created["intervention"]["factor"] == "rollout.max_new_tokens"
    assert "behavior.truncation" in created["intervention"]["evidence"]["findings"]
    # A real fix beats its counterfactual control, not only the parent it started from.
    judged = next(e for e in shown["events"] if e["event"] == "judged")
    assert judged["attributed"]["against"] == "control" and judged["outcome"] == "improvement", judged
    assert "outcome: improvement vs control" in out


def test_killed_at_each_phase_resumes_to_the_same_lineage(stepped, tmp_path):
    root = init_workspace(tmp_path / "ws", settings_patch=FAST_SETTINGS)
    killed = 0
    for target in KILL_SEQUENCE:
        proc = evo("step", "-C", root, env={"EVO_FAULT_KILL_AT": target}, check=False)
        if proc.returncode == -9:
            killed += 1
            status = evo_json("status", "-C", root)
            assert status["in_flight"], f"no in-flight step reported after a kill at {target}"
        else:
            assert proc.returncode == 0, proc.stderr
    assert killed == len(KILL_SEQUENCE), f"only {killed} of {len(KILL_SEQUENCE)} fault points were reached"
    final = evo("step", "-C", root)  # resumes the last interrupted phase and finishes
    assert "--- evo step summary ---" in final.stdout
    assert lineage_fingerprint(root) == stepped["fingerprint"]
    # No duplicate commits either: exactly one version commit for v1.
    commit = evo_json("show", "-C", root, "v1")["commit"]
    log = subprocess.run(["git", "log", "--format=%s", commit], cwd=root, capture_output=True, text=True).stdout
    assert sum(1 for line in log.splitlines() if line.startswith("v1:")) == 1


def test_three_steps_promote_prune_and_remember(stepped, tmp_path):
    root = copy_workspace(stepped["root"], tmp_path / "ws")
    evo("step", "-C", root)
    evo("step", "-C", root)
    log = evo_json("log", "-C", root)
    versions = log["versions"] if isinstance(log, dict) else log
    names = [v["name"] for v in versions]
    assert names[:4] == ["v0", "v1", "v2", "v3"]
    for v in versions:
        assert v["outcome"] in ("improvement", "regression", "mixed", "insufficient"), v
        h = v["headline"]
        assert h["ci_low"] <= h["delta"] <= h["ci_high"], v
    shown = {v: evo_json("show", "-C", root, v) for v in names}
    events = [e["event"] for v in names for e in shown[v]["events"]]
    assert events.count("promoted") >= 2, "v0 plus at least one promoted candidate"
    for v in names[1:]:  # every judged candidate was decided; its latest decision is its state (a kept one
        decisions = [e["event"] for e in shown[v]["events"] if e["event"] in ("promoted", "pruned", "kept")]
        assert decisions and {"promoted": "promoted", "pruned": "pruned", "kept": "frontier"}[decisions[-1]] == \
            shown[v]["state"], (v, decisions, shown[v]["state"])  # may be pruned later, when the frontier is full)
    # Notes carry it, not just our JSON: read the raw notes ref with git.
    notes = subprocess.run(["git", "log", "-p", "refs/notes/evo/lineage"], cwd=root, capture_output=True, text=True).stdout
    assert '"event": "judged"' in notes or '"event":"judged"' in notes
    memory = (root / "memory" / "lineage.md").read_text()
    assert "v3" in memory
    rows = evo_json("skills", "list", "-C", root)
    used = {r["name"]: r for r in rows if r["uses"]}
    assert used and all(r["domains"] == ["arithmetic"] for r in used.values())
    committed = subprocess.run(["git", "log", "--format=%s", "main"], cwd=root, capture_output=True, text=True).stdout
    assert "evo: record v3" in committed


def test_a_different_baseline_leads_to_a_different_first_intervention(stepped, tmp_path):
    """The same loop on a v0 with ample generation length finds no truncation to fix."""
    from loop_support import FAST_RECIPE

    ample = init_workspace(tmp_path / "ample", FAST_RECIPE.replace("max_new_tokens: 4", "max_new_tokens: 12"),
                           settings_patch=FAST_SETTINGS)
    evo("step", "-C", ample)
    short_v1 = evo_json("show", "-C", stepped["root"], "v1")
    ample_v1 = evo_json("show", "-C", ample, "v1")
    pick = lambda shown: next(e for e in shown["events"] if e["event"] == "created")["intervention"]  # noqa: E731
    assert pick(short_v1)["factor"] == "rollout.max_new_tokens"
    assert pick(ample_v1)["factor"] != "rollout.max_new_tokens"
    diagnosis = (ample / ".evo/artifacts/v0/diagnosis.json").read_text()
    assert '"behavior.truncation"' not in diagnosis  # and it is evidence-driven: no truncation finding, no length fix
