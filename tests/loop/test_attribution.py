"""Verdicts that are evidence: the counterfactual control, seed replicates, the noise floor,
and a loop that keeps learning until a plateau is measured.

Real git, real tiny training, the real `evo` command in subprocesses.
"""

from __future__ import annotations

import json
import sys

import pyarrow.parquet as pq
import pytest
from loop_support import copy_workspace, evo, evo_json, init_workspace, patch_settings

from evo import confine

pytestmark = pytest.mark.skipif(not confine.available(), reason="the agent runs confined: bubblewrap cannot build a jail on this machine (make test installs it where it can)")

# More steps of this recipe keep helping: room to answer (8 tokens) and the embedded default's
# batch and learning rate, in versions of 10 steps (measured: continuing v0 for 10 steps gains
# about +0.06 Avg@8, an interval well above 0). Fewer calibration runs than the default keep it quick.
LEARNING_RECIPE = """\
name: arithmetic-test-learning
seed: 0
domain: {name: arithmetic}
model: {name: builtin:tiny-char}
rollout: {prompts_per_step: 16, num_generations: 8, max_new_tokens: 8}
grpo: {steps: 10, learning_rate: 0.0005}
reward:
  terms: [{name: correctness, weight: 1.0}]
eval: {k: 8, seed: 42}
"""

# A command agent that makes a change which cannot affect training (the anomaly filter is
# disabled, so its n-gram length is never read) and claims a skill, as an LLM agent might.
NOOP_AGENT = """
import json, pathlib, sys, yaml
key = sys.argv[1]
recipe = yaml.safe_load(pathlib.Path("recipe.yaml").read_text())
anomaly = recipe.setdefault("filters", {}).setdefault("anomaly", {})
before = anomaly.get(key, 4)
anomaly[key] = before + 1
pathlib.Path("recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
pathlib.Path(".evo").mkdir(exist_ok=True)
pathlib.Path(".evo/manifest.json").write_text(json.dumps({
    "kind": "policy", "factor": f"filters.anomaly.{key}", "change": f"filters.anomaly.{key}: {before} -> {before + 1}",
    "hypothesis": "a no-op: the anomaly filter is disabled", "evidence": {"findings": [], "metrics": {}},
    "predicted_effect": "none", "expected_cost": "same", "skill": "std-group-filter"}))
"""

# A command agent that revises the harness only: the paired evaluation re-run with twice the samples.
EVAL_K_AGENT = """
import json, pathlib, yaml
recipe = yaml.safe_load(pathlib.Path("recipe.yaml").read_text())
k = recipe["eval"]["k"]
recipe["eval"]["k"] = 2 * k
pathlib.Path("recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
pathlib.Path(".evo").mkdir(exist_ok=True)
pathlib.Path(".evo/manifest.json").write_text(json.dumps({
    "kind": "harness", "factor": "eval.k", "change": f"eval.k: {k} -> {2 * k}",
    "hypothesis": "more samples", "evidence": {"findings": [], "metrics": {}},
    "predicted_effect": "a narrower interval", "expected_cost": "evaluation x2"}))
"""


def _agent(root, tmp_path, name, text, *args):
    script = tmp_path / "agent" / f"{name}.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(text)
    patch_settings(root, {"agent": {"backend": "command", "command": " ".join([sys.executable, str(script), *args]),
                                    "sandbox": {"read_only": [str(script.parent)]}}})


def _noop_agent(root, tmp_path, key):
    _agent(root, tmp_path, f"noop-{key}", NOOP_AGENT, key)


def _trained(root, version):
    return next(e for e in evo_json("show", "-C", root, version)["events"] if e["event"] == "trained")


def _judged(root, version):
    return next(e for e in evo_json("show", "-C", root, version)["events"] if e["event"] == "judged")


@pytest.fixture(scope="module")
def noop_ws(tmp_path_factory):
    """Bootstrap + a no-op candidate v1 + a second no-op sibling v2 from the same parent."""
    tmp = tmp_path_factory.mktemp("noop")
    root = init_workspace(tmp / "ws", LEARNING_RECIPE)  # the default floor: v0 under 4 seeds
    _noop_agent(root, tmp, "ngram")
    evo("step", "-C", root)
    _noop_agent(root, tmp, "max_ngram_repeats")
    evo("step", "-C", root)
    return root


def test_a_no_op_intervention_is_never_an_improvement(noop_ws):
    judged = _judged(noop_ws, "v1")
    assert judged["schema"] == 2 and judged["attributed"]["against"] == "control"
    assert judged["outcome"] != "improvement", judged
    # The confound this guards against: more training alone beat the parent.
    assert judged["progress"]["headline"]["boot_ci_low"] > 0, "setup: more steps of this recipe must help"
    assert abs(judged["headline"]["delta"]) < judged["headline"]["ci_high"] - judged["headline"]["ci_low"]
    shown = evo("show", "-C", noop_ws, "v1").stdout
    assert "control" in shown
    body = evo_json("pr", "-C", noop_ws, "v1")["body"]
    assert "counterfactual control" in body and "progress vs `v0`" in body


def test_skill_evidence_records_the_attributed_outcome(noop_ws):
    text = (noop_ws / "skills" / "std-group-filter" / "SKILL.md").read_text()
    outcome = _judged(noop_ws, "v1")["outcome"]
    assert f"{{version: v1, outcome: {outcome}, domain: arithmetic}}" in text and outcome != "improvement"
    lineage_md = (noop_ws / "memory" / "lineage.md").read_text()
    assert "vs control" in lineage_md and "vs v0: improvement" in lineage_md


def test_siblings_share_one_control(noop_ws):
    v0 = evo_json("show", "-C", noop_ws, "v0")
    controls = [e for e in v0["events"] if e["event"] == "control"]
    assert [c["key"] for c in controls] == ["steps10-seed0"] and controls[0]["for"] == "v1"
    runs = sorted((noop_ws / ".evo" / "artifacts" / "controls" / "v0").glob("*/summary.json"))
    assert len(runs) == 1, "the control is trained once"
    first = json.loads((noop_ws / ".evo" / "journal" / "done" / "v1.json").read_text())["results"]["control"]
    second = json.loads((noop_ws / ".evo" / "journal" / "done" / "v2.json").read_text())["results"]["control"]
    assert first == {"reused": [], "trained": ["steps10-seed0"]}
    # The control continues v0's prompt schedule (steps 10..19), as the candidates do: new prompts, not v0's again.
    control_summary = json.loads((runs[0]).read_text())
    assert control_summary["step_offset"] == 10
    assert _trained(noop_ws, "v1")["schedule"] == {"offset": 10, "steps": 10}
    assert second == {"reused": ["steps10-seed0"], "trained": []}
    assert _judged(noop_ws, "v2")["attributed"]["control"] == "steps10-seed0"
    # The control's own comparison with the parent is kept on the parent: what continuing gave.
    assert controls[0]["continuation"]["outcome"] == "improvement"
    # The noise floor was measured at the bootstrap: v0 under four seeds.
    assert [e["seed"] for e in v0["events"] if e["event"] == "replicated"] == [1, 2, 3]
    assert _judged(noop_ws, "v1")["noise"]["runs"] == 4


def test_a_harness_revision_shares_its_parents_control_run_and_a_siblings_run(noop_ws, tmp_path):
    """Below a harness-only revision the policy, the prompt schedule and the training recipe are the parent's:
    a candidate's control there is the parent's control run (re-evaluated under the new eval.k), never trained
    again, and it counts no GRPO steps. The candidate v4 makes v1's change again (the heuristic's re-test of
    an inconclusive change under more samples): the same start policy, schedule, seed and recipe outside
    `eval` are the same training, so v1's run is cloned and evaluated under v4's eval.k, not trained again;
    v2, whose recipe trains differently, trained its own."""
    root, out, spent_before = _noop_below_a_harness_revision(noop_ws, tmp_path)
    assert "control: v3's recipe continued for 10 steps (seed 0): the run of v0's control" in out, out
    assert "v4: the same training as v1's run v1" in out, out
    v4_trained = _trained(root, "v4")
    assert v4_trained["shared_from"] == "v1" and v4_trained["grpo_steps"] == 0 and v4_trained["estimate"] == {}
    assert _trained(root, "v2")["shared_from"] is None and _trained(root, "v2")["grpo_steps"] == 10
    gated = next(e for e in evo_json("show", "-C", root, "v4")["events"] if e["event"] == "gated")
    assert gated["estimate"]["tokens_trained"] == 0, "the gate's estimate counts no training for a reused run"
    art = root / ".evo/artifacts"
    assert (art / "v4/checkpoint/model.safetensors").read_bytes() == (art / "v1/checkpoint/model.safetensors").read_bytes()
    from evo.lineage import Lineage
    from evo.loop.versions import recipe_of

    v4_k, v1_k = (recipe_of(Lineage.open(root), v)["eval"]["k"] for v in ("v4", "v1"))
    assert v4_k > v1_k and json.loads((art / "v4/eval.json").read_text())["k"] == v4_k  # evaluated as v4 measures
    assert json.loads((art / "v1/eval.json").read_text())["k"] == v1_k  # v1's evidence left as it was
    v4 = evo_json("show", "-C", root, "v4")
    assert v4["parents"] == ["v3"] and _judged(root, "v4")["attributed"]["control"] == "steps10-seed0"
    control = next(e for e in evo_json("show", "-C", root, "v3")["events"] if e["event"] == "control")
    assert control["shared_from"] == "controls/v0/steps10-seed0" and control["grpo_steps"] == 0
    assert json.loads((root / ".evo/journal/done/v4.json").read_text())["results"]["control"] == {
        "reused": ["steps10-seed0"], "trained": []}
    shared, original = root / ".evo/artifacts/controls/v3/steps10-seed0", root / ".evo/artifacts/controls/v0/steps10-seed0"
    weights = "checkpoint/model.safetensors"
    assert (shared / weights).read_bytes() == (original / weights).read_bytes()
    revised_k = recipe_of(Lineage.open(root), "v3")["eval"]["k"]
    assert revised_k > 8 and json.loads((shared / "eval.json").read_text())["k"] == revised_k  # the revision's eval.k
    assert json.loads((original / "eval.json").read_text())["k"] == 8  # the original run is left as it was
    assert _spent_steps(root) == spent_before  # nothing trained: the control and the run are both reused
    evo("fsck", "-C", root)  # the shared runs' artifacts are hashed like any control's


# An unconfined agent (agent.sandbox.confine: false) that, besides its no-op edit, overwrites the weights of the
# control run its candidate's control would be cloned from (a broken counterfactual flatters any candidate).
TAMPERING_NOOP_AGENT = NOOP_AGENT + """
weights = pathlib.Path(sys.argv[2])
data = bytearray(weights.read_bytes())
data[-64:] = bytes(64)
weights.unlink()
weights.write_bytes(bytes(data))
"""


def _rejected_unconfined(root, tmp_path, version, name, text, *args):
    """Run one step with command agent `text`, unconfined; assert `version` was rejected and return why."""
    _agent(root, tmp_path, name, text, *args)
    patch_settings(root, {"agent": {"sandbox": {"confine": False}}})
    out = evo("step", "-C", root).stdout
    assert "status: rejected" in out, out
    return next(e for e in evo_json("show", "-C", root, version)["events"] if e["event"] == "rejected")["reason"]


def test_an_agent_that_changes_a_control_run_to_be_shared_is_rejected(noop_ws, tmp_path):
    root = _harness_revision_of_v0(noop_ws, tmp_path)
    weights = root / ".evo/artifacts/controls/v0/steps10-seed0/checkpoint/model.safetensors"
    reason = _rejected_unconfined(root, tmp_path, "v4", "tamper", TAMPERING_NOOP_AGENT, "ngram", str(weights))
    assert "controls/v0/steps10-seed0/checkpoint/model.safetensors" in reason, reason
    assert not (root / ".evo/artifacts/controls/v3").exists(), "nothing cloned or trained for a rejected candidate"


def test_an_agent_that_changes_the_optimizer_moments_a_candidate_starts_from_is_rejected(noop_ws, tmp_path):
    """A child and its control take the parent's AdamW moments: they steer every update, so they are evidence."""
    root = copy_workspace(noop_ws, tmp_path / "ws")
    moments = root / ".evo/artifacts/v0/checkpoint/trainer_state.safetensors"
    reason = _rejected_unconfined(root, tmp_path, "v3", "tamper", TAMPERING_NOOP_AGENT, "ngram", str(moments))
    assert "v0/checkpoint/trainer_state.safetensors has sha256" in reason, reason


# A command agent that proposes continuing the parent's recipe for twice its steps.
LONGER_AGENT = """
import json, pathlib
pathlib.Path(".evo").mkdir(exist_ok=True)
pathlib.Path(".evo/manifest.json").write_text(json.dumps({
    "kind": "continue", "factor": "continue", "change": "continue for 20 more steps", "steps": 20,
    "hypothesis": "still learning", "evidence": {"findings": [], "metrics": {}},
    "predicted_effect": "a larger gain", "expected_cost": "10 more steps"}))
"""


@pytest.mark.parametrize("below_a_harness_revision", [False, True])
def test_a_longer_continuation_extends_the_shorter_control(noop_ws, tmp_path, below_a_harness_revision):
    """v0's 10-step control is the first 10 steps of a 20-step continuation of v0, or of a harness-only revision
    of v0 (the same policy and training, another eval): those steps are not trained again."""
    root = (_harness_revision_of_v0(noop_ws, tmp_path) if below_a_harness_revision
            else copy_workspace(noop_ws, tmp_path / "ws"))
    parent, version = ("v3", "v4") if below_a_harness_revision else ("v0", "v3")
    spent_before = _spent_steps(root)
    _agent(root, tmp_path, "longer", LONGER_AGENT)
    out = evo("step", "-C", root).stdout
    assert "the same run 10 steps in" in out, out
    control = next(e for e in evo_json("show", "-C", root, parent)["events"]
                   if e["event"] == "control" and e["key"] == "steps20-seed0")
    assert control["extended_from"] == "controls/v0/steps10-seed0" and control["grpo_steps"] == 10
    assert _spent_steps(root) == spent_before + 10
    assert _trained(root, version)["schedule"] == {"offset": 10, "steps": 20}
    rows = pq.read_table(root / f".evo/artifacts/{version}/rollouts.parquet").column("step").to_pylist()
    assert sorted(set(rows)) == list(range(20))  # the version's evidence covers all 20 steps
    from evo.lineage import Lineage
    from evo.loop.versions import recipe_of

    measured_k = json.loads((root / ".evo/artifacts" / control["run"] / "eval.json").read_text())["k"]
    assert measured_k == recipe_of(Lineage.open(root), parent)["eval"]["k"] == (8 if parent == "v0" else measured_k)
    evo("fsck", "-C", root)  # the extended run is hashed like any control


# The same proposal from an agent that also slips a chat template into the checkpoint the continuation extends.
INJECTING_LONGER_AGENT = LONGER_AGENT + """
import sys
pathlib.Path(sys.argv[1], "chat_template.jinja").write_text("INJECTED {{ messages[0]['content'] }}")
"""


def test_an_agent_that_adds_a_file_to_the_checkpoint_a_continuation_extends_is_rejected(noop_ws, tmp_path):
    root = copy_workspace(noop_ws, tmp_path / "ws")
    checkpoint = root / ".evo/artifacts/controls/v0/steps10-seed0/checkpoint"
    reason = _rejected_unconfined(root, tmp_path, "v3", "inject", INJECTING_LONGER_AGENT, str(checkpoint))
    assert "controls/v0/steps10-seed0/checkpoint/chat_template.jinja was added" in reason, reason
    assert not (root / ".evo/artifacts/controls/v0/steps20-seed0").exists(), "nothing extended or trained"


def _harness_revision_of_v0(noop_ws, tmp_path):
    """A copy of noop_ws with a harness-only revision v3 of v0 (eval.k doubled); its root."""
    root = copy_workspace(noop_ws, tmp_path / "ws")
    _agent(root, tmp_path, "eval-k", EVAL_K_AGENT)
    evo("step", "-C", root)
    harness = evo_json("show", "-C", root, "v3")
    assert next(e for e in harness["events"] if e["event"] == "created")["intervention"]["kind"] == "harness"
    assert harness["parents"] == ["v0"], harness["parents"]
    return root


def _noop_below_a_harness_revision(noop_ws, tmp_path):
    """`_harness_revision_of_v0` + a no-op candidate v4 of v3: (root, v4's step output, the GRPO steps spent
    before v4's step)."""
    root = _harness_revision_of_v0(noop_ws, tmp_path)
    spent_before = _spent_steps(root)
    _noop_agent(root, tmp_path, "ngram")
    return root, evo("step", "-C", root).stdout, spent_before


def _spent_steps(root):
    from evo.lineage import Lineage
    from evo.loop.gate import spent

    return spent(Lineage.open(root).read_all())["grpo_steps"]


def test_two_training_seeds_record_both_and_widen_the_interval(tmp_path):
    root = init_workspace(tmp_path / "ws", LEARNING_RECIPE,
                          settings_patch={"search": {"train_seeds": 2, "calibration_seeds": 2}})
    _noop_agent(root, tmp_path, "ngram")
    evo("step", "-C", root)
    v1 = evo_json("show", "-C", root, "v1")
    replicas = [e for e in v1["events"] if e["event"] == "replicated"]
    assert [r["seed"] for r in replicas] == [1] and replicas[0]["artifacts"]
    assert all(a["sha256"] for a in replicas[0]["artifacts"])
    assert (root / ".evo/artifacts" / replicas[0]["run"] / "checkpoint").is_dir()
    v0 = evo_json("show", "-C", root, "v0")
    assert sorted(e["key"] for e in v0["events"] if e["event"] == "control") == ["steps10-seed0", "steps10-seed1"]
    judged = next(e for e in v1["events"] if e["event"] == "judged")
    h = judged["headline"]
    assert judged["seeds"] == 2 and h["noise_floor"] > 0
    assert h["ci_high"] - h["ci_low"] > h["boot_ci_high"] - h["boot_ci_low"], "seed noise widens the task-only interval"


# A command agent that doubles the steps per version: the candidate trains the control's 10 steps and 10 more.
STEPS_AGENT = """
import json, pathlib, yaml
recipe = yaml.safe_load(pathlib.Path("recipe.yaml").read_text())
recipe["grpo"]["steps"] = 20
pathlib.Path("recipe.yaml").write_text(yaml.safe_dump(recipe, sort_keys=False))
pathlib.Path(".evo").mkdir(exist_ok=True)
pathlib.Path(".evo/manifest.json").write_text(json.dumps({
    "kind": "policy", "factor": "grpo.steps", "change": "grpo.steps: 10 -> 20",
    "hypothesis": "more steps per version", "evidence": {"findings": [], "metrics": {}},
    "predicted_effect": "up", "expected_cost": "training x2", "skill": "longer-versions"}))
"""


def test_a_gain_seed_luck_hides_is_measured_again_under_three_seeds_and_resolved(tmp_path):
    """Two calibration runs (1 df) give a floor of about ±0.24: v1's real gain (+0.06, its task-sampling interval
    above 0) is `insufficient`. The loop measures the same change again under 3 fresh seeds (seed 0, which
    selected it, is not judged again), and the verdict reads the seed term from the three seed-matched
    differences with the control. An agent's manifest may not claim to be such a re-measure."""
    root = init_workspace(tmp_path / "ws", LEARNING_RECIPE, settings_patch={"search": {"calibration_seeds": 2}})
    _agent(root, tmp_path, "steps", STEPS_AGENT)
    evo("step", "-C", root)
    first = _judged(root, "v1")["headline"]
    assert _judged(root, "v1")["outcome"] == "insufficient" and first["delta"] > 0 and first["boot_ci_low"] > 0, first
    out = evo("step", "-C", root).stdout
    v2 = evo_json("show", "-C", root, "v2")
    created = next(e for e in v2["events"] if e["event"] == "created")
    assert created["agent"] == "loop" and created["intervention"]["remeasures"] == "v1"
    assert created["intervention"]["seeds"] == 3 and created["intervention"]["change"] == "grpo.steps: 10 -> 20"
    assert _trained(root, "v2")["seed"] == 1 and not _trained(root, "v2")["shared_from"]
    assert sorted(e["seed"] for e in v2["events"] if e["event"] == "replicated") == [2, 3]
    controls = [e["key"] for e in evo_json("show", "-C", root, "v0")["events"] if e["event"] == "control"]
    assert sorted(controls) == [f"steps10-seed{s}" for s in range(4)]
    judged = _judged(root, "v2")
    assert judged["seeds"] == 3 and judged["attributed"]["noise"]["paired"] is True
    h = judged["headline"]
    assert h["noise_floor"] < first["noise_floor"] / 4 and judged["outcome"] == "improvement", h
    assert "common seeds" in " ".join(judged["reasons"]) and "Measured again: v1" in created["intervention"]["hypothesis"]
    assert "v1's change measured again under 3 seeds" in out
    skill = (root / "skills" / "longer-versions" / "SKILL.md").read_text()
    assert "{version: v2, outcome: improvement" in skill and "version: v1" not in skill, "one change counts once"
    claims = STEPS_AGENT.replace('"expected_cost": "training x2"', '"expected_cost": "training x2", "remeasures": "v1"')
    _agent(root, tmp_path, "claims", claims.replace("= 20", "= 30").replace("10 -> 20", "20 -> 30"))
    out = evo("step", "-C", root).stdout
    assert "status: rejected" in out and "only the loop sets" in out, out


def test_control_none_keeps_the_old_comparison_and_says_it_is_confounded(tmp_path):
    root = init_workspace(tmp_path / "ws", LEARNING_RECIPE,
                          settings_patch={"search": {"control": "none", "calibration_seeds": 1}})
    _noop_agent(root, tmp_path, "ngram")
    out = evo("step", "-C", root).stdout
    assert "confounded: yes" in out
    judged = _judged(root, "v1")
    assert judged["confounded"] is True and judged["attributed"]["against"] == "v0"
    assert not (root / ".evo/artifacts/controls").exists()
    assert "**confounded**" in evo_json("pr", "-C", root, "v1")["body"]


def test_a_converged_recipe_explores_then_stops_on_a_measured_plateau(tmp_path):
    """lr 1e-9 trains nothing: the plateau is measured, one untriggered lever is tried (search.explore 1) and
    judged against the control like any candidate, then the loop stops and says what it explored."""
    converged = LEARNING_RECIPE.replace("learning_rate: 0.0005", "learning_rate: 1.0e-9")
    root = init_workspace(tmp_path / "ws", converged, settings_patch={"search": {"calibration_seeds": 2, "explore": 1}})
    data = evo_json("run", "-C", root, "--steps", "8")
    last = data["steps"][-1]
    assert last["status"] == "nothing-to-do", [s["status"] for s in data["steps"]]
    assert "plateau measured" in last["message"] and last["plateau"]["continuation"]["outcome"] != "improvement"
    explored = _explorations(root)
    assert len(explored) == 1, explored
    version, manifest = explored[0]
    assert manifest["kind"] == "policy" and manifest["hypothesis"].startswith("Exploration, not evidence: continuing v")
    assert version["state"] != "promoted" and _judged(root, version["name"])["attributed"]["against"].startswith("control")
    assert f"explored 1 untriggered lever(s) from {version['parents'][0]}" in last["message"]
    out = evo("step", "-C", root).stdout
    assert "status: nothing-to-do" in out and "plateau:" in out and "Δ" in out


def test_search_explore_0_stops_at_the_plateau_itself(tmp_path):
    converged = LEARNING_RECIPE.replace("learning_rate: 0.0005", "learning_rate: 1.0e-9")
    root = init_workspace(tmp_path / "ws", converged, settings_patch={"search": {"calibration_seeds": 2, "explore": 0}})
    data = evo_json("run", "-C", root, "--steps", "6")
    last = data["steps"][-1]
    assert last["status"] == "nothing-to-do" and "plateau measured" in last["message"]
    assert _explorations(root) == []


def _explorations(root):
    """(log row, intervention manifest) of every version whose manifest is marked an exploration."""
    out = []
    for v in evo_json("log", "-C", root)["versions"][1:]:
        created = next(e for e in evo_json("show", "-C", root, v["name"])["events"] if e["event"] == "created")
        if (created.get("intervention") or {}).get("exploration"):
            out.append((v, created["intervention"]))
    return out


def test_a_learning_recipe_is_continued_and_never_stopped_while_it_still_learns(tmp_path):
    root = init_workspace(tmp_path / "ws", LEARNING_RECIPE)
    data = evo_json("run", "-C", root, "--steps", "5")
    for report in data["steps"]:
        if report["status"] == "nothing-to-do":  # only on a measured plateau
            assert report["plateau"]["continuation"]["outcome"] != "improvement", report
    log = evo_json("log", "-C", root)["versions"]
    continued = [v for v in log if v["intervention"] == "continue"]
    assert any(v["state"] == "promoted" and v["outcome"] == "improvement" for v in continued), log
    first = next(v for v in continued if v["state"] == "promoted")
    created = next(e for e in evo_json("show", "-C", root, first["name"])["events"] if e["event"] == "created")
    assert created["intervention"]["kind"] == "continue" and "continuation" in created["intervention"]["hypothesis"]


def test_evo_compare_of_two_versions_reads_the_workspace_noise_floor(noop_ws):
    cmp = evo_json("compare", "-C", noop_ws, "v0", "v1")
    assert cmp["noise_floor"] > 0 and cmp["child_seeds"] == 1 and cmp["baseline_seeds"] == 1
    assert cmp["ci_high"] - cmp["ci_low"] > cmp["boot_ci_high"] - cmp["boot_ci_low"]
    assert evo_json("compare", "-C", noop_ws, "base", "v0")["baseline_seeds"] is None  # the base model is no draw
