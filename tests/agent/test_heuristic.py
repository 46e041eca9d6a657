"""The heuristic agent on crafted diagnoses: evidence in, one single-factor intervention out."""

from __future__ import annotations

import json

import pytest

from evo.agent import get_agent
from evo.agent.guard import check_candidate
from evo.agent.memory import Memory, update_memory
from evo.recipe import load_recipe

TERMS_WITH_FORMAT_GATE = [{"name": "correctness", "weight": 1.0}, {"name": "format", "mode": "gate"}]

# skill -> (recipe changes, metrics that fire it, metrics that must not, expected recipe factor)
CASES = {
    "raise-generation-length": (
        {}, {"behavior/truncated_frac": 0.30},
        {"behavior/truncated_frac": 0.01, "behavior/truncated_frac_max_stratum": 0.05}, "rollout.max_new_tokens"),
    "format-gate-repair": (
        {"reward.terms": TERMS_WITH_FORMAT_GATE}, {"behavior/format_fail_frac": 0.35, "behavior/format_fail_truncated_frac": 0.9},
        {"behavior/format_fail_frac": 0.35, "behavior/format_fail_truncated_frac": 0.2}, "filters.truncation_mask"),
    "std-group-filter": (
        {"rollout.max_new_tokens": 64}, {"signal/dead_group_ratio": 0.55, "behavior/truncated_frac": 0.0},
        {"signal/dead_group_ratio": 0.10, "behavior/truncated_frac": 0.0}, "filters.std_group"),
    "dual-level-filter": (
        {"rollout.max_new_tokens": 64}, {"signal/dead_group_ratio": 0.5, "behavior/repetitive_frac": 0.2, "behavior/echo_trap_frac": 0.0},
        {"signal/dead_group_ratio": 0.5, "behavior/repetitive_frac": 0.0, "behavior/echo_trap_frac": 0.0}, "filters"),
    "continuous-partial-credit": (
        {"rollout.max_new_tokens": 64},
        {"signal/dead_group_ratio": 0.6, "signal/spread_in_dead_groups/partial_credit": 0.7, "behavior/truncated_frac": 0.0},
        {"signal/dead_group_ratio": 0.6, "signal/spread_in_dead_groups/partial_credit": 0.0, "behavior/truncated_frac": 0.0},
        "reward.terms"),
    "instruction-following-judge-bonus": (
        {"rollout.max_new_tokens": 64},
        {"signal/dead_group_ratio": 0.6, "signal/spread_in_dead_groups/judge_if": 0.5, "behavior/truncated_frac": 0.0},
        {"signal/dead_group_ratio": 0.6, "signal/spread_in_dead_groups/judge_if": 0.05, "behavior/truncated_frac": 0.0},
        "reward.terms"),
    # schedule levers (issue: keep learning)
    "lower-learning-rate": (
        {}, {"signal/clip_frac_high_last": 0.35},
        {"signal/clip_frac_high_last": 0.01, "signal/kl_last": 0.3, "signal/kl_change": 0.5}, "grpo.learning_rate"),
    "cut-learning-rate-to-kl": (
        {}, {"signal/kl_first": 3.383, "signal/kl_last": 3.324},
        {"signal/kl_first": 0.118, "signal/kl_last": 0.254}, "grpo.learning_rate"),
    "sample-at-temperature-one": (
        {"rollout.temperature": 0.3}, {"signal/single_answer_group_frac": 1.0, "signal/dead_group_ratio": 1.0},
        {"signal/single_answer_group_frac": 0.2, "signal/dead_group_ratio": 1.0}, "rollout.temperature"),
    "raise-temperature": (
        {}, {"signal/entropy_change": -0.7, "signal/dead_group_ratio_change": 0.3},
        {"signal/entropy_change": -0.7, "signal/dead_group_ratio_change": 0.0}, "rollout.temperature"),
    "raise-kl-coef": (
        {}, {"signal/entropy_change": -0.7, "signal/kl_last": 0.3},
        {"signal/entropy_change": -0.1, "signal/kl_last": 0.3}, "grpo.kl_coef"),
    "longer-versions": (
        {}, {"version/continue_streak": 2, "signal/reward_slope_t": 3.5},
        {"version/continue_streak": 1, "signal/reward_slope_t": 3.5}, "grpo.steps"),
    "more-policy-iterations": (
        {}, {"version/continuation_measured": 1, "version/continuation_z": 0.4, "signal/kl_last": 0.01,
             "signal/clip_frac_high_last": 0.0},
        {"version/continuation_measured": 1, "version/continuation_z": 3.0, "signal/kl_last": 0.01,
         "signal/clip_frac_high_last": 0.0}, "grpo.num_iterations"),
    # trainer levers (issue: loss aggregation, dynamic sampling, SNR filtering, model-judge rewards)
    "token-mean-aggregation": (
        {}, {"signal/length_advantage_corr_abs": 0.62, "signal/length_cv_in_groups": 0.5},
        {"signal/length_advantage_corr_abs": 0.62, "signal/length_cv_in_groups": 0.05}, "grpo.loss_aggregation"),
    "dynamic-sampling-refill": (
        {"filters.std_group": {"enabled": True}}, {"signal/filter_dropped/std_group/spread": 0.55},
        {"signal/filter_dropped/std_group/spread": 0.12}, "filters.std_group.refill"),
    "snr-filter": (
        {}, {"signal/weak_spread_group_frac": 0.5, "signal/spread_live_groups": 40},
        {"signal/weak_spread_group_frac": 0.05, "signal/spread_live_groups": 40}, "filters.snr"),
    "model-judge-bonus": (
        {"rollout.max_new_tokens": 64, "reward.model_judge": {"rubric": "judges/rubric.md", "endpoint": "http://127.0.0.1:8000/v1"}},
        {"signal/dead_group_ratio": 0.6, "signal/spread_in_dead_groups/model_judge": 0.5, "behavior/truncated_frac": 0.0},
        {"signal/dead_group_ratio": 0.6, "signal/spread_in_dead_groups/model_judge": 0.05, "behavior/truncated_frac": 0.0},
        "reward.terms"),
}


def _propose(settings, ctx):
    return get_agent(settings, backend="heuristic").propose(ctx)


def _guard(proposal, ctx, worktree, settings, changed=("recipe.yaml",)):
    check_candidate(list(changed), proposal.manifest, ctx.recipe, (worktree / "recipe.yaml").read_text(), settings)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_builtin_trigger_fires_on_its_evidence(name, kit, make_ctx, worktree, settings):
    changes, fires, _, factor = CASES[name]
    kit.set_recipe(worktree, **changes)
    ctx = make_ctx(kit.diagnosis(fires), skills=[kit.skill_named(name)])
    proposal = _propose(settings, ctx)
    assert proposal is not None and proposal.manifest["skill"] == name
    assert proposal.manifest["kind"] == "policy" and proposal.manifest["factor"] == factor
    after = load_recipe(worktree / "recipe.yaml")
    assert after != ctx.recipe, "the patch must land in the worktree's recipe.yaml"
    for key, value in proposal.manifest["evidence"]["metrics"].items():
        assert fires[key] == value and key in proposal.manifest["hypothesis"]
    _guard(proposal, ctx, worktree, settings)  # a heuristic proposal always passes the guard
    written = json.loads((worktree / ".evo" / "manifest.json").read_text())
    assert written["change"] == proposal.manifest["change"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_no_builtin_trigger_fires_without_its_evidence(name, kit, make_ctx, worktree, settings):
    changes, _, quiet, _ = CASES[name]
    kit.set_recipe(worktree, **changes)
    before = (worktree / "recipe.yaml").read_text()
    ctx = make_ctx(kit.diagnosis(quiet), skills=[kit.skill_named(name)])
    assert _propose(settings, ctx) is None
    assert (worktree / "recipe.yaml").read_text() == before


def test_requirements_on_the_recipe_gate_a_skill(kit, make_ctx, settings):
    # format-gate-repair's evidence, but the recipe has no format gate: nothing to repair.
    ctx = make_ctx(kit.diagnosis(CASES["format-gate-repair"][1]), skills=[kit.skill_named("format-gate-repair")])
    assert _propose(settings, ctx) is None


def test_judge_bonus_only_in_domains_that_emit_the_judge(kit, make_ctx, worktree, settings):
    changes, fires, _, _ = CASES["instruction-following-judge-bonus"]
    kit.set_recipe(worktree, **changes)
    ctx = make_ctx(kit.diagnosis(fires), skills=[kit.skill_named("instruction-following-judge-bonus")], domain="code")
    assert _propose(settings, ctx) is None


def test_no_longer_turns_when_the_episode_budget_is_what_cut(kit, make_ctx, settings):
    """Measured on calc trained at temperature 0.6 (seed 9): 21% of validation episodes truncated, every one by the
    64-token episode budget (idle turns and their error observations), none by a turn's max_new_tokens."""
    skill = [kit.skill_named("raise-generation-length")]
    assert _propose(settings, make_ctx(kit.diagnosis({"behavior/truncated_frac": 0.21, "behavior/budget_cut_share": 1.0}),
                                       skills=skill)) is None
    cut_turns = kit.diagnosis({"behavior/truncated_frac": 0.21, "behavior/budget_cut_share": 0.1})
    assert _propose(settings, make_ctx(cut_turns, skills=skill)).manifest["factor"] == "rollout.max_new_tokens"


def test_an_episode_budget_that_cuts_acting_episodes_is_raised(worktree, kit, make_ctx, settings):
    """Measured on calc with max_total_tokens 24 (seed 2): 13% of training episodes cut, all by the episode budget,
    none idling; the policy unlearned the calculator, so validation truncates little (4%). At temperature 0.6 (seed 9)
    the budget-cut episodes idled (78% of validation ones): no budget raise, and no longer turns either."""
    kit.set_recipe(worktree, **{"rollout.max_total_tokens": 24})
    skills = [kit.skill_named(n) for n in ("raise-episode-budget", "raise-generation-length")]
    acting = {"behavior/truncated_frac": 0.037, "behavior/budget_cut_share": 1.0, "behavior/budget_cut_idle_share": 0.0,
              "behavior/train_truncated_frac": 0.129, "behavior/train_budget_cut_share": 1.0,
              "behavior/train_budget_cut_idle_share": 0.0}
    proposal = _propose(settings, make_ctx(kit.diagnosis(acting), skills=skills, domain="calc"))
    assert proposal.manifest["skill"] == "raise-episode-budget"
    assert load_recipe(worktree / "recipe.yaml")["rollout"]["max_total_tokens"] == 48
    kit.set_recipe(worktree, **{"rollout.max_total_tokens": 64})
    idling = {"behavior/truncated_frac": 0.21, "behavior/budget_cut_share": 1.0, "behavior/budget_cut_idle_share": 0.78,
              "behavior/train_truncated_frac": 0.008, "behavior/train_budget_cut_share": 1.0,
              "behavior/train_budget_cut_idle_share": 0.95}
    assert _propose(settings, make_ctx(kit.diagnosis(idling), skills=skills, domain="calc")) is None


def test_truncation_hidden_in_one_stratum_fires_through_the_any_branch(kit, make_ctx, settings):
    metrics = {"behavior/truncated_frac": 0.02, "behavior/truncated_frac_max_stratum": 0.41}
    proposal = _propose(settings, make_ctx(kit.diagnosis(metrics)))
    assert proposal.manifest["factor"] == "rollout.max_new_tokens"
    assert "behavior/truncated_frac_max_stratum = 0.41" in proposal.manifest["hypothesis"]


def test_different_parents_lead_to_different_interventions(kit, make_ctx, worktree, settings):
    # A too-short generation limit: truncation dominates, and the dead groups are its symptom.
    short = kit.diagnosis({"behavior/truncated_frac": 0.64, "signal/dead_group_ratio": 0.9,
                           "signal/spread_in_dead_groups/partial_credit": 0.8},
                          [kit.finding("behavior.truncation"), kit.finding("signal.dead_groups")])
    first = _propose(settings, make_ctx(short))
    assert first.manifest["change"] == "rollout.max_new_tokens: 4 → 8"

    # Ample length but many dead groups: a signal fix, never the length.
    kit.set_recipe(worktree, **{"rollout.max_new_tokens": 64})
    ample = kit.diagnosis({"behavior/truncated_frac": 0.0, "behavior/truncated_frac_max_stratum": 0.0,
                           "signal/dead_group_ratio": 0.6, "signal/spread_in_dead_groups/partial_credit": 0.7},
                          [kit.finding("signal.dead_groups")])
    second = _propose(settings, make_ctx(ample))
    assert second.manifest["kind"] == "policy"
    assert second.manifest["skill"] in ("std-group-filter", "continuous-partial-credit")
    assert second.manifest["factor"] != first.manifest["factor"]


def test_ranking_prefers_the_stronger_evidence_and_is_deterministic(kit, make_ctx, worktree, settings, tmp_path):
    kit.set_recipe(worktree, **{"rollout.max_new_tokens": 64})
    original = (worktree / "recipe.yaml").read_text()
    # Partial credit's latent spread is overwhelming; std-group-filter only sees a modest dead ratio.
    diag = kit.diagnosis({"behavior/truncated_frac": 0.0, "signal/dead_group_ratio": 0.31,
                          "signal/spread_in_dead_groups/partial_credit": 1.0})
    proposals = []
    for _ in range(2):
        (worktree / "recipe.yaml").write_text(original)
        proposals.append(_propose(settings, make_ctx(diag)))
    assert proposals[0].manifest == proposals[1].manifest
    assert proposals[0].manifest["skill"] == "continuous-partial-credit"
    backtest = proposals[0].manifest["backtest"]
    assert backtest == {"reward": {"terms": [{"name": "correctness", "weight": 1.0, "mode": "add"},
                                             {"name": "partial_credit", "weight": 0.5, "mode": "add"}]}}
    assert "share of dead groups that regain" in proposals[0].manifest["predicted_effect"]


def _pruned_lineage(change="rollout.max_new_tokens: 4 → 8"):
    return [
        {"name": "v0", "parents": [], "state": "promoted", "intervention": None, "outcome": None, "headline": None},
        {"name": "v1", "parents": ["v0"], "state": "pruned", "outcome": "regression",
         "intervention": {"kind": "policy", "factor": "rollout.max_new_tokens", "change": change,
                          "skill": "raise-generation-length"},
         "headline": {"metric": "score/avg_at_k", "value": 0.1, "delta": -0.05, "ci_low": -0.08, "ci_high": -0.02}},
    ]


TRUNCATED = {"behavior/truncated_frac": 0.5, "behavior/truncated_frac_max_stratum": 0.6, "signal/dead_group_ratio": 0.1}


def test_a_refuted_intervention_is_not_retried_from_lineage(kit, make_ctx, settings):
    proposal = _propose(settings, make_ctx(kit.diagnosis(TRUNCATED), lineage=_pruned_lineage()))
    assert proposal is None or proposal.manifest["change"] != "rollout.max_new_tokens: 4 → 8"


def test_a_refuted_intervention_is_not_retried_from_memory(kit, make_ctx, settings, tmp_path):
    root = tmp_path / "ws"
    update_memory(root, _pruned_lineage(), {})
    # The memory alone (no lineage handed over) must still block it.
    proposal = _propose(settings, make_ctx(kit.diagnosis(TRUNCATED), memory=Memory.load(root), root=root))
    assert proposal is None or proposal.manifest["factor"] != "rollout.max_new_tokens"
    # ... while an unrelated refutation does not.
    other = _pruned_lineage("rollout.max_new_tokens: 8 → 16")
    update_memory(root, other, {})
    again = _propose(settings, make_ctx(kit.diagnosis(TRUNCATED), memory=Memory.load(root), root=root))
    assert again.manifest["change"] == "rollout.max_new_tokens: 4 → 8"


def test_an_intervention_already_on_the_path_is_not_repeated(kit, make_ctx, worktree, settings):
    lineage = [
        {"name": "v0", "parents": [], "state": "promoted", "intervention": None},
        {"name": "v1", "parents": ["v0"], "state": "promoted", "outcome": "improvement",
         "intervention": {"kind": "policy", "factor": "rollout.max_new_tokens", "change": "rollout.max_new_tokens: 4 → 8"}},
    ]
    # v1 was reverted on disk (back to 4) but the change is on the path: proposing it again would repeat history.
    proposal = _propose(settings, make_ctx(kit.diagnosis(TRUNCATED), lineage=lineage, parent="v1"))
    assert proposal is None or proposal.manifest["change"] != "rollout.max_new_tokens: 4 → 8"


def test_negative_evidence_skill_refutes_a_multiplicative_efficiency_factor(kit, make_ctx, worktree, settings, tmp_path):
    # A workspace skill that would add exactly the refuted term: the heuristic must skip it.
    folder = tmp_path / "ws" / "skills" / "speed-bonus"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: speed-bonus\ndescription: reward short episodes\nkind: policy\n"
        "triggers:\n  - {metric: behavior/turns_mean, op: \">\", value: 10}\n"
        "patch:\n  - {path: reward.terms, op: add_term, value: {name: efficiency, mode: factor}}\n---\nbody\n")
    from evo.agent.skills import load_skills

    skills = load_skills(tmp_path / "ws")
    agent = get_agent(settings)
    proposal = agent.propose(make_ctx(kit.diagnosis({"behavior/turns_mean": 40}), skills=skills))
    assert proposal is None or "efficiency" not in json.dumps(proposal.manifest)
    assert any("speed-bonus" in n and "multiplicative-efficiency-collapse" in n for n in agent.last_notes)
    # Without the negative-evidence skill the same trigger would have been acted on.
    plain = [s for s in skills if s.name != "multiplicative-efficiency-collapse"]
    assert "efficiency" in json.dumps(agent.propose(make_ctx(kit.diagnosis({"behavior/turns_mean": 40}), skills=plain)).manifest)


def test_insufficient_outcome_triggers_a_harness_revision_first(kit, make_ctx, worktree, settings):
    last = {"version": "v1", "outcome": "insufficient",
            "headline": {"metric": "score/avg_at_k", "value": 0.3, "delta": 0.01, "ci_low": -0.03, "ci_high": 0.05}}
    ctx = make_ctx(kit.diagnosis(TRUNCATED), last_outcome=last)
    first = _propose(settings, ctx)
    assert first.manifest["kind"] == "harness" and first.manifest["factor"] == "eval.k"
    assert first.manifest["change"] == "eval.k: 8 → 16"
    assert "insufficient" in first.manifest["hypothesis"]
    _guard(first, ctx, worktree, settings)

    # Second call of the step: the harness was revised and the parent re-diagnosed -> a policy intervention.
    ctx2 = make_ctx(kit.diagnosis(TRUNCATED), last_outcome=last, harness_revised=True)
    second = _propose(settings, ctx2)
    assert second.manifest["kind"] == "policy" and second.manifest["factor"] == "rollout.max_new_tokens"
    assert load_recipe(worktree / "recipe.yaml")["eval"]["k"] == 16  # the revision stays, the policy change adds to it

def test_more_samples_are_not_drawn_when_the_seed_noise_makes_the_verdict_inconclusive(kit, make_ctx, worktree,
                                                                                        settings):
    # calc, v1 of a real loop: ±0.20 of which ±0.05 task sampling; doubling k leaves it at ±0.19
    seedy = {"metric": "score/avg_at_k", "value": 0.507, "delta": 0.010, "ci_low": -0.189, "ci_high": 0.209,
             "boot_ci_low": -0.044, "boot_ci_high": 0.065, "noise_floor": 0.192}
    agent = get_agent(settings)
    proposal = agent.propose(make_ctx(kit.diagnosis(TRUNCATED), last_outcome={"version": "v1", "outcome": "insufficient",
                                                                              "headline": seedy}))
    assert proposal is None or proposal.manifest["factor"] != "eval.k"
    assert any("not doubling eval.k" in n and "seed noise" in n for n in agent.last_notes), agent.last_notes

    # The same Δ where task sampling is most of the width: doubling k can separate it, so it is proposed.
    sampling = dict(seedy, delta=0.05, ci_low=-0.01, ci_high=0.11, boot_ci_low=-0.008, boot_ci_high=0.108,
                    noise_floor=0.02)
    revised = _propose(settings, make_ctx(kit.diagnosis(TRUNCATED), last_outcome={"version": "v1", "outcome": "insufficient",
                                                                                  "headline": sampling}))
    assert revised.manifest["factor"] == "eval.k" and "at best [" in revised.manifest["predicted_effect"]


def test_mixed_outcome_installs_an_analyzer_that_can_explain_it(kit, make_ctx, worktree, settings):
    last = {"version": "v1", "outcome": "mixed", "headline": {"metric": "score/avg_at_k", "delta": 0.02}}
    ctx = make_ctx(kit.diagnosis({"behavior/truncated_frac": 0.0, "signal/dead_group_ratio": 0.05}), last_outcome=last)
    proposal = _propose(settings, ctx)
    assert proposal.manifest["kind"] == "harness"
    installed = worktree / proposal.manifest["factor"]
    assert installed.parent.name == "analyzers" and "def analyze(ctx)" in installed.read_text()
    _guard(proposal, ctx, worktree, settings, changed=[proposal.manifest["factor"]])


def test_threshold_adjustment_when_an_installed_analyzer_nearly_fires(kit, make_ctx, worktree, settings):
    from evo.resources import resource_dir

    (worktree / "analyzers").mkdir()
    for skill, name in (("truncation-by-stratum", "truncation_by_stratum"), ("length-reward-coupling", "length_reward_coupling")):
        (worktree / "analyzers" / f"{name}.py").write_text((resource_dir("skills") / skill / "skill.py").read_text())
    last = {"version": "v1", "outcome": "mixed", "headline": {}}
    metrics = {"behavior/truncated_frac": 0.02, "behavior/truncated_frac_max_stratum": 0.12,
               "behavior/length_reward_corr_abs": 0.01, "signal/dead_group_ratio": 0.05}
    ctx = make_ctx(kit.diagnosis(metrics), last_outcome=last)
    proposal = _propose(settings, ctx)
    assert proposal.manifest["factor"] == "analyzers/truncation_by_stratum.py"
    assert proposal.manifest["change"].endswith("THRESHOLD 0.15 → 0.075")
    assert "THRESHOLD = 0.075" in (worktree / "analyzers" / "truncation_by_stratum.py").read_text()


def test_healthy_diagnosis_gets_no_bottleneck_fix(kit, make_ctx, worktree, settings):
    healthy = {"behavior/truncated_frac": 0.0, "behavior/truncated_frac_max_stratum": 0.01,
               "signal/dead_group_ratio": 0.04, "behavior/repetitive_frac": 0.0, "behavior/echo_trap_frac": 0.0,
               "score/avg_at_k": 0.8}
    before = (worktree / "recipe.yaml").read_text()
    agent = get_agent(settings)
    assert agent.propose(make_ctx(kit.diagnosis(healthy))) is None
    assert (worktree / "recipe.yaml").read_text() == before
    assert not (worktree / ".evo" / "manifest.json").exists()


def test_missing_evidence_gets_a_harness_revision_not_a_fix(kit, make_ctx, worktree, settings):
    # Overall truncation is low, but the per-stratum view is missing: measure before fixing.
    before = (worktree / "recipe.yaml").read_text()
    proposal = _propose(settings, make_ctx(kit.diagnosis({"behavior/truncated_frac": 0.02, "signal/dead_group_ratio": 0.05})))
    assert proposal.manifest["kind"] == "harness"
    assert proposal.manifest["factor"] == "analyzers/truncation_by_stratum.py"
    assert "raise-generation-length" in proposal.manifest["hypothesis"]
    assert (worktree / "recipe.yaml").read_text() == before


def test_no_second_harness_revision_in_one_step(kit, make_ctx, settings):
    last = {"version": "v1", "outcome": "insufficient", "headline": {}}
    healthy = {"behavior/truncated_frac": 0.0, "behavior/truncated_frac_max_stratum": 0.0, "signal/dead_group_ratio": 0.0}
    assert _propose(settings, make_ctx(kit.diagnosis(healthy), last_outcome=last, harness_revised=True)) is None


def test_backtest_spec_replays_through_the_harness(kit, make_ctx, worktree, settings, tmp_path):
    """The manifest's backtest is the patch evo.harness.backtest takes: dead groups with latent partial credit revive."""
    backtest = pytest.importorskip("evo.harness.backtest").backtest
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for g in range(6):  # groups 0-3 dead under correctness (all fail) but partial credit varies; 4-5 alive
        for s in range(4):
            correct = float(g >= 4 and s == 0)
            rows.append({"traj_id": f"s0-g{g}-{s}", "step": 0, "group": g, "sample": s, "truncated": False,
                         "num_tokens": 5, "reward": correct, "reward/correctness": correct,
                         "reward/partial_credit": 0.1 * s if g < 4 else 0.5})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), run_dir / "rollouts.parquet")

    kit.set_recipe(worktree, **{"rollout.max_new_tokens": 64})
    ctx = make_ctx(kit.diagnosis({"behavior/truncated_frac": 0.0, "signal/dead_group_ratio": 0.67,
                                  "signal/spread_in_dead_groups/partial_credit": 1.0}),
                   skills=[kit.skill_named("continuous-partial-credit")])
    proposal = _propose(settings, ctx)
    result = backtest(run_dir, proposal.manifest["backtest"], ctx.recipe)
    assert result["before"]["dead_groups"] == 4 and result["after"]["dead_groups"] == 0
    assert "100% of dead groups regain non-zero spread" in result["message"]


def test_a_sibling_with_the_same_change_is_a_duplicate_unless_the_harness_changed(kit, make_ctx, settings):
    lineage = [
        {"name": "v0", "parents": [], "state": "promoted", "intervention": None},
        {"name": "v1", "parents": ["v0"], "state": "frontier", "outcome": "insufficient",
         "intervention": {"kind": "policy", "factor": "rollout.max_new_tokens", "change": "rollout.max_new_tokens: 4 → 8"}},
    ]
    agent = get_agent(settings)
    first = agent.propose(make_ctx(kit.diagnosis(TRUNCATED), lineage=lineage))
    assert first is None or first.manifest["change"] != "rollout.max_new_tokens: 4 → 8"
    assert any("already tried from the same parent in v1" in n for n in agent.last_notes)
    # after a harness revision in this step (e.g. eval.k raised), the same change is a meaningful re-test
    retest = agent.propose(make_ctx(kit.diagnosis(TRUNCATED), lineage=lineage, harness_revised=True))
    assert retest.manifest["change"] == "rollout.max_new_tokens: 4 → 8"


def test_a_siblings_harness_revision_is_not_repeated_either(kit, make_ctx, settings):
    lineage = [
        {"name": "v0", "parents": [], "state": "promoted", "intervention": None},
        {"name": "v3", "parents": ["v0"], "state": "frontier", "outcome": "insufficient",
         "harness_revision": {"kind": "harness", "factor": "eval.k", "change": "eval.k: 8 → 16"},
         "intervention": {"kind": "policy", "factor": "rollout.max_new_tokens", "change": "rollout.max_new_tokens: 4 → 8"}},
    ]
    last = {"version": "v3", "outcome": "insufficient", "headline": {}}
    proposal = get_agent(settings).propose(make_ctx(kit.diagnosis(TRUNCATED), lineage=lineage, last_outcome=last))
    assert proposal is None or proposal.manifest["change"] not in ("eval.k: 8 → 16", "rollout.max_new_tokens: 4 → 8")


def test_continue_training_fires_on_a_measured_gain_or_a_rising_curve(kit, make_ctx, worktree, settings):
    skill = [kit.skill_named("continue-training")]
    before = (worktree / "recipe.yaml").read_text()
    measured = make_ctx(kit.diagnosis({"version/continuation_measured": 1, "version/continuation_z": 4.1}), skills=skill)
    proposal = _propose(settings, measured)
    assert proposal.manifest["kind"] == "continue" and proposal.manifest["factor"] == "continue"
    assert "v0" in proposal.manifest["change"] and "version/continuation_z = 4.1" in proposal.manifest["hypothesis"]
    assert (worktree / "recipe.yaml").read_text() == before, "continuing changes nothing"
    _guard(proposal, measured, worktree, settings, changed=())
    rising = make_ctx(kit.diagnosis({"version/continuation_measured": 0, "signal/reward_slope_t": 3.0}), skills=skill)
    assert _propose(settings, rising).manifest["kind"] == "continue"
    # A measured continuation that did not help outweighs a rising training curve: that is a plateau.
    plateau = {"version/continuation_measured": 1, "version/continuation_z": 0.8, "signal/reward_slope_t": 3.0}
    assert _propose(settings, make_ctx(kit.diagnosis(plateau), skills=skill)) is None


def test_a_continue_already_tried_from_this_parent_is_not_repeated(kit, make_ctx, settings):
    diag = kit.diagnosis({"version/continuation_measured": 1, "version/continuation_z": 4.1})
    sibling = {"name": "v3", "parents": ["v0"], "state": "pruned", "outcome": "insufficient",
               "intervention": {"kind": "continue", "factor": "continue", "change": "continue v0's recipe for 20 more steps"}}
    ctx = make_ctx(diag, skills=[kit.skill_named("continue-training")], lineage=[sibling])
    assert _propose(settings, ctx) is None


def test_a_kl_that_jumped_at_once_cuts_the_rate_by_the_root_of_its_excess(kit, make_ctx, settings):
    """calc at 5e-3 (seed 8): first-third KL 3.383, last 3.324; the rising-KL rule (lower-learning-rate) misses it,
    and a halving left the step still five times too long (2.5e-3 collapsed as well)."""
    jumped = {"signal/kl_first": 3.383, "signal/kl_last": 3.324, "signal/kl_change": -0.018, "signal/clip_frac_high_last": 0.0}
    skills = [kit.skill_named("cut-learning-rate-to-kl"), kit.skill_named("lower-learning-rate")]
    proposal = _propose(settings, make_ctx(kit.diagnosis(jumped), skills=skills))
    assert proposal is not None and proposal.manifest["skill"] == "cut-learning-rate-to-kl"
    assert proposal.manifest["change_to"] == pytest.approx(proposal.manifest["change_from"] * (0.1 / 3.383) ** 0.5, rel=1e-3)
    assert proposal.manifest["change"] == "grpo.learning_rate: 0.0005 → 8.6e-05"  # three significant digits
    assert proposal.manifest["evidence"]["metrics"] == {"signal/kl_first": 3.383}


def test_a_rate_that_overwrote_the_policy_is_cut_before_its_dead_groups_are_filtered(kit, make_ctx, settings,
                                                                                      worktree):
    """calc at 5e-3 (seed 0): 97% of groups dead, first-third KL 3.25. The dead groups are the step size's doing;
    ranked on strength alone StdGroupFilter came first (0.000, like its control) and the cut second (0.296)."""
    wrecked = {"signal/kl_first": 3.2485, "signal/kl_last": 3.1685, "signal/kl_change": -0.0246,
               "signal/clip_frac_high_last": 0.0, "signal/dead_group_ratio": 0.9656,
               "behavior/truncated_acting_frac": 0.0, "behavior/max_turns_frac": 0.0}
    dead = [kit.skill_named("std-group-filter")]
    baseline = (worktree / "recipe.yaml").read_text()
    alone = _propose(settings, make_ctx(kit.diagnosis(wrecked), skills=dead))
    assert alone is not None and alone.manifest["skill"] == "std-group-filter"  # it applies, and is the stronger
    (worktree / "recipe.yaml").write_text(baseline)  # the proposal wrote its patch into the worktree
    both = dead + [kit.skill_named("cut-learning-rate-to-kl")]
    proposal = _propose(settings, make_ctx(kit.diagnosis(wrecked), skills=both))
    assert proposal is not None and proposal.manifest["skill"] == "cut-learning-rate-to-kl"


def test_a_scale_toward_a_target_needs_the_metric_it_reads():
    from evo.agent.conditions import apply_patch
    from evo.errors import AgentError

    op = [{"path": "grpo.learning_rate", "op": "scale", "toward": {"metric": "signal/kl_first", "target": 0.1, "power": 0.5}}]
    recipe = {"grpo": {"learning_rate": 0.004}}
    assert apply_patch(recipe, recipe, op, metrics={"signal/kl_first": 1.6})["grpo"]["learning_rate"] == pytest.approx(0.001)
    with pytest.raises(AgentError, match="cannot scale grpo.learning_rate toward signal/kl_first: the diagnosis gives it as None"):
        apply_patch(recipe, recipe, op, metrics={})


def test_a_plateau_at_a_high_clip_fraction_leads_to_a_learning_rate_candidate(kit, make_ctx, settings):
    plateau = {"version/continuation_measured": 1, "version/continuation_z": 0.5, "version/continuation_delta": 0.003,
               "signal/reward_slope_t": 0.4, "signal/clip_frac_high_last": 0.31, "signal/kl_last": 0.04,
               "signal/kl_change": 0.2, "behavior/truncated_frac": 0.0, "signal/dead_group_ratio": 0.1}
    proposal = _propose(settings, make_ctx(kit.diagnosis(plateau)))  # every built-in skill
    assert proposal is not None and proposal.manifest["factor"] == "grpo.learning_rate"
    assert proposal.manifest["change_to"] == pytest.approx(proposal.manifest["change_from"] * 0.5)


@pytest.mark.parametrize("name, changes", [
    ("model-judge-bonus", {"rollout.max_new_tokens": 64}),  # the evidence, but no judge in the recipe
    ("dynamic-sampling-refill", {}),  # the StdGroupFilter is off: nothing to refill
    ("token-mean-aggregation", {"grpo.loss_aggregation": "token-mean"}),  # already a token mean
])
def test_lever_skills_need_their_recipe_precondition(name, changes, kit, make_ctx, worktree, settings):
    kit.set_recipe(worktree, **changes)
    ctx = make_ctx(kit.diagnosis(CASES[name][1]), skills=[kit.skill_named(name)])
    assert _propose(settings, ctx) is None


@pytest.mark.parametrize("name, backtest", [
    ("token-mean-aggregation", {"grpo": {"loss_aggregation": "token-mean"}}),  # an objective change, replayable
    ("snr-filter", {"filters": {"snr": {"enabled": True, "top_p": 0.9, "include_zero": False, "loss_scaling": "none",
                                        "component": "total"}}}),
    ("dynamic-sampling-refill", {"filters": {"std_group": {"refill": True}}}),  # the backtest says it cannot replay it
])
def test_lever_manifests_carry_the_patch_the_backtest_replays(name, backtest, kit, make_ctx, worktree, settings):
    changes, fires, _, _ = CASES[name]
    kit.set_recipe(worktree, **changes)
    proposal = _propose(settings, make_ctx(kit.diagnosis(fires), skills=[kit.skill_named(name)]))
    assert proposal.manifest["backtest"] == backtest


@pytest.mark.parametrize("truncation, fires", [
    # calc's v0 (a clean clone of 3c95478): 12% of validation episodes truncated, every one by the episode budget,
    # 74% of those after idling; no length skill raises a limit for that, so it does not bar the filter
    ({"behavior/truncated_frac": 0.118, "behavior/truncated_acting_frac": 0.031}, True),
    ({"behavior/truncated_frac": 0.30, "behavior/truncated_acting_frac": 0.30}, False),  # cut while acting: length first
    ({"behavior/truncated_frac": 0.30}, False),  # a diagnosis from before the acting share: the old gate
    ({"behavior/truncated_frac": 0.05}, True),
])
def test_the_length_gate_blames_only_episodes_cut_while_acting(truncation, fires, kit, make_ctx, worktree, settings):
    kit.set_recipe(worktree, **{"rollout.max_new_tokens": 64})
    metrics = {"signal/dead_group_ratio": 0.36, "behavior/max_turns_frac": 0.0, **truncation}
    proposal = _propose(settings, make_ctx(kit.diagnosis(metrics), skills=[kit.skill_named("std-group-filter")]))
    assert (proposal is not None and proposal.manifest["skill"] == "std-group-filter") is fires


def test_the_dead_group_filter_comes_with_its_refill_and_says_what_it_costs(kit, make_ctx, worktree, settings):
    """DAPO's dynamic sampling, not a shrinking batch: on calc the filter alone lost 0.068 Avg@k at 60 steps where the
    refilled filter gained 0.069 (skills/std-group-filter). Up to max_generation_batches batches are generated a step,
    so the manifest's cost says so."""
    changes, fires, _, _ = CASES["std-group-filter"]
    kit.set_recipe(worktree, **changes)
    proposal = _propose(settings, make_ctx(kit.diagnosis(fires), skills=[kit.skill_named("std-group-filter")]))
    std = load_recipe(worktree / "recipe.yaml")["filters"]["std_group"]
    assert std["enabled"] is True and std["refill"] is True
    assert proposal.manifest["expected_cost"] == "training token budget x3 of the parent"


def test_a_cold_sampler_is_fixed_before_a_filter_drops_every_dead_group(kit, make_ctx, worktree, settings):
    """arithmetic at temperature 0.3 (seed 3): every group agreed on one answer and none had a reward spread. The
    StdGroupFilter's evidence holds too, but it would drop every group; the sampler is the limit, so it goes first."""
    kit.set_recipe(worktree, **{"rollout.temperature": 0.3, "rollout.max_new_tokens": 8})
    cold = {"signal/single_answer_group_frac": 1.0, "signal/dead_group_ratio": 1.0, "signal/answer_diversity_recent": 0.125,
            "behavior/truncated_frac": 0.0, "behavior/max_turns_frac": 0.0}
    skills = [kit.skill_named("std-group-filter"), kit.skill_named("sample-at-temperature-one")]
    proposal = _propose(settings, make_ctx(kit.diagnosis(cold), skills=skills))
    assert proposal.manifest["skill"] == "sample-at-temperature-one" and proposal.manifest["change_to"] == 1.0
