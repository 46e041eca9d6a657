"""`evo step` on the embedded multi-turn domains, end to end (subprocesses, real git, real tiny training).

- `evo init --domain D` + one `evo step` bootstraps v0 (base model, calibration
  seeds), proposes v1 from v0's diagnosis, trains it and its control, judges
  and records it;
- a different v0 of the same domain leads to different interventions, chosen
  from its own diagnosis. patch with four turns instead of eight: the turn
  limit binds (~40% of episodes end at it) and is raised first, where the
  eight-turn v0 starts elsewhere. calc with the calculator off: most tasks
  are never solved in k samples and the calculator is offered first (a
  withheld tool is a limit of the episode, like the turn limit), where the
  plain v0, whose tool is on, starts elsewhere (the dead groups). The variant's step stops at the cost gate once v1 is proposed
  (nothing of v1 is trained: the proposal is what is compared).

Test scale: the shipped v0 with fewer, smaller steps and a trimmed
evaluation, as `tests/loop` does for arithmetic; two calibration seeds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "loop"))
from loop_support import evo, evo_json, init_workspace  # noqa: E402

from evo.recipe import set_path  # noqa: E402
from evo.resources import resource_dir  # noqa: E402
from evo.yamlio import dump_yaml, load_yaml  # noqa: E402

TEST_SCALE = {"grpo.steps": 6, "rollout.prompts_per_step": 8, "rollout.num_generations": 4, "eval.k": 4}
SETTINGS = {"search": {"frontier_size": 1, "calibration_seeds": 2}}
VARIANTS = {"calc": "calc-tiny-notool", "patch": "patch-tiny-short"}


def recipe_text(name: str, changes: dict | None = None) -> str:
    """The shipped recipe `name` with `changes` (dotted path -> value), at TEST_SCALE unless `changes` says otherwise."""
    recipe = load_yaml(resource_dir("recipes") / f"{name}.yaml")
    for key, value in {**TEST_SCALE, **(changes or {})}.items():
        recipe = set_path(recipe, key, value)
    return dump_yaml(recipe)


def first_intervention(root: Path) -> dict:
    created = next(e for e in evo_json("show", "-C", root, "v1")["events"] if e["event"] == "created")
    return created["intervention"]


def propose_v1(root: Path, recipe: str) -> Path:
    """A workspace whose v0 is trained and v1 proposed, each held at the cost gate (nothing of v1 is trained)."""
    root = init_workspace(root, recipe, {**SETTINGS, "gate": {"approval_above_gpu_hours": 0.0}})
    assert "status: awaiting-approval" in evo("step", "-C", root).stdout  # v0 waits at the gate too
    evo("approve", "-C", root, "v0", "--reason", "test")
    out = evo("step", "-C", root).stdout
    assert "status: awaiting-approval" in out and "version: v1" in out, out
    return root


@pytest.fixture(scope="module", params=["calc", pytest.param("patch", marks=pytest.mark.slow)])  # patch: ~3.5 min
def stepped(request, tmp_path_factory):
    domain = request.param
    root = init_workspace(tmp_path_factory.mktemp(domain) / "ws", recipe_text(f"{domain}-tiny"), SETTINGS)
    return domain, root, evo("step", "-C", root).stdout


def test_one_step_bootstraps_v0_and_judges_v1(stepped):
    domain, root, out = stepped
    assert "--- evo step summary ---" in out and "status: done" in out and "version: v1" in out
    assert "bootstrap: v0 trained" in out and "noise floor:" in out
    v0 = evo_json("show", "-C", root, "v0")
    assert v0["state"] == "promoted"
    v1 = evo_json("show", "-C", root, "v1")
    events = [e["event"] for e in v1["events"]]
    for name in ("created", "diagnosed", "trained", "evaluated", "judged"):
        assert events.count(name) == 1, (name, events)
    judged = next(e for e in v1["events"] if e["event"] == "judged")
    assert judged["outcome"] in ("improvement", "regression", "mixed", "insufficient")
    iv = first_intervention(root)
    if iv["kind"] != "continue":  # a continuation is judged against its parent; anything else against its control
        assert judged["attributed"]["against"] == "control"
    # Evidence-driven: the intervention cites metrics that v0's diagnosis measured.
    import json

    diagnosis = json.loads((root / ".evo/artifacts/v0/diagnosis.json").read_text())
    cited = iv["evidence"]["metrics"]
    assert cited and all(key in diagnosis["metrics"] for key in cited), (cited, sorted(diagnosis["metrics"]))
    # The multi-turn evidence reached the harness.
    for key in ("behavior/turns_mean", "behavior/tool_use_frac", "behavior/abandonment_frac"):
        assert key in diagnosis["metrics"], key
    # A calculator's answer is the policy's own computation, not a leak from the environment.
    assert all(v["audit"] != "leakage" for v in diagnosis["audits"]["vetoes"]), diagnosis["audits"]
    assert evo_json("skills", "list", "-C", root)  # skills load for the new domain


def test_a_different_v0_leads_to_a_different_first_intervention(stepped, tmp_path):
    domain, root, _ = stepped
    variant = propose_v1(tmp_path / "variant", recipe_text(VARIANTS[domain]))
    plain, other = first_intervention(root), first_intervention(variant)
    import json

    for ws, iv in ((root, plain), (variant, other)):
        diagnosis = json.loads((ws / ".evo/artifacts/v0/diagnosis.json").read_text())
        assert all(key in diagnosis["metrics"] for key in iv["evidence"]["metrics"])
    expected = {"patch": "domain.options.max_turns", "calc": "domain.options.tool"}[domain]
    assert other["factor"] == expected and plain["factor"] != other["factor"], (plain, other)


def test_actions_cut_by_the_turn_limit_raise_it_though_every_episode_ends_on_the_budget(tmp_path):
    """calc at `max_new_tokens: 8`: "calc 74+" is cut, the error observation and idle actions fill the 64-token
    episode budget, and the episode ends on the budget. The turn's limit is what cut it (`turns_cut`), so the turn's
    limit is raised first (measured at full settings, seed 0: v1 0.496 against its control's 0.000; before the
    driver counted the turns it cut, the episode-budget reading barred that lever and v1 filtered dead groups)."""
    root = propose_v1(tmp_path / "ws", recipe_text("calc-tiny", {"rollout.max_new_tokens": 8}))
    import json

    metrics = json.loads((root / ".evo/artifacts/v0/diagnosis.json").read_text())["metrics"]
    assert metrics["behavior/truncated_frac"] > 0.9 and metrics["behavior/budget_cut_share"] < 0.5, metrics
    iv = first_intervention(root)
    assert iv["skill"] == "raise-generation-length" and iv["change_to"] == 16, iv


def test_a_v0_harmed_by_an_efficiency_factor_has_the_factor_dropped_first(tmp_path):
    """The paper's efficiency-factor collapse (D.5), from a user's v0: the shipped calc v0 with its reward multiplied
    by `efficiency`. v0 learns to take fewer turns than the base model and solves less (measured: 22% fewer turns,
    Avg@k 0.226 against the base's 0.432, nine in ten validation episodes one turn), and v1's proposal removes the
    factor, ahead of the dead-group skills whose evidence the factor produced. A repair: v0's weights carry the harm,
    so v1 trains from the base model, and solves more than v0's recipe carried on (measured at full settings: 0.506
    against its control's 0.168, +0.338 [+0.255, +0.417]). Full recipe scale: the harm takes the shipped 20 steps."""
    recipe = load_yaml(resource_dir("recipes") / "calc-tiny.yaml")  # full scale: the harm takes the shipped 20 steps
    recipe = set_path(recipe, "reward.terms", [{"name": "correctness", "weight": 1.0}, {"name": "efficiency", "mode": "factor"}])
    root = propose_v1(tmp_path / "ws", dump_yaml(recipe))
    import json

    metrics = json.loads((root / ".evo/artifacts/v0/diagnosis.json").read_text())["metrics"]
    assert metrics["version/turns_ratio_vs_parent"] < 1 and metrics["version/ci_high_vs_parent"] < 0, metrics
    iv = first_intervention(root)
    assert iv["skill"] == "drop-efficiency-term", iv
    assert iv["change_to"] == [{"name": "correctness", "weight": 1.0, "mode": "add"}], iv
    evo("approve", "-C", root, "v1", "--reason", "test")
    out = evo("step", "-C", root).stdout
    assert "status: done" in out and "v1 trains from base's policy, not v0's" in out, out
    v1 = evo_json("show", "-C", root, "v1")["events"]
    assert next(e for e in v1 if e["event"] == "trained")["start"] == "base"
    assert json.loads((root / ".evo/artifacts/v1/summary.json").read_text())["init_checkpoint"] is None
    judged = next(e for e in v1 if e["event"] == "judged")
    assert judged["attributed"]["against"] == "control"
    assert judged["headline"]["value"] > judged["headline"]["baseline_value"], judged["headline"]
    # A repair's start older than the parent is outside the step's tamper check: it is checked before training.
    from evo.errors import WorkspaceError
    from evo.loop import training
    from evo.loop.context import StepContext

    ws = StepContext(root)
    ws.open()
    assert training._init_of(ws, "v0", "v1").endswith("v0/checkpoint")  # v1's child, a repair starting at v0
    with open(root / ".evo/artifacts/v0/checkpoint/model.safetensors", "ab") as weights:
        weights.write(b"\0")
    with pytest.raises(WorkspaceError, match="not training from v0's policy: v0/checkpoint/model.safetensors has sha256"):
        training._init_of(ws, "v0", "v1")
