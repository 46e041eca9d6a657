"""A collapse the parent's verdict already carried is not the version's doing: recorded, not deciding.

Measured on arithmetic sampled at temperature 0.3 (seed 3): every group of v0 agreed on one answer (100% dead).
Raising the generation limit gave +0.107 [+0.086, +0.131] against the control, which shares the dead groups, yet
the inherited collapse vetoed it and the pruned version refuted the change for the workspace.
"""

from __future__ import annotations

from types import SimpleNamespace

from evo.loop import versions as V
from evo.loop.decide import decide
from evo.loop.judge import split_inherited
from evo.vocabulary import Action


def veto(kind: str, audit: str = "collapse") -> dict:
    return {"audit": audit, "message": f"{audit} ({kind}): ...", "evidence": {"kind": kind, "rows": []}}


def record(parents: list[str], judged: dict | None, kind: str = "policy") -> SimpleNamespace:
    """A lineage record: its `created` intervention kind, a `trained` event unless a harness-only revision, `judged`."""
    events = {"created": {"event": "created", "intervention": {"kind": kind}}, "judged": judged,
              "trained": None if kind == "harness" else {"event": "trained"}}
    return SimpleNamespace(parents=parents, last=lambda event: events.get(event))


def lineage(v0: dict, **more) -> dict:
    return {"v0": record([], {"event": "judged", "outcome": "regression", **v0}), **more}


def test_a_collapse_of_the_parents_kind_is_inherited_and_any_other_veto_is_the_versions():
    records = lineage({"vetoes": [veto("dead_groups")]})
    own, inherited = split_inherited([veto("dead_groups"), veto("leaked", "leakage")], records, "v0")
    assert [v["audit"] for v in own] == ["leakage"] and inherited == [veto("dead_groups")]
    own, inherited = split_inherited([veto("one_turn")], records, "v0")  # a new kind of collapse: the version's doing
    assert own == [veto("one_turn")] and inherited == []
    assert split_inherited([veto("dead_groups")], {}, None) == ([veto("dead_groups")], [])  # v0: nothing to inherit from
    # what a parent inherited, its child inherits too
    records = lineage({"vetoes": []}, v1=record(["v0"], {"event": "judged", "vetoes": [], "inherited_vetoes": [veto("dead_groups")]}))
    assert split_inherited([veto("dead_groups")], records, "v1") == ([], [veto("dead_groups")])
    # a veto that names no kind matches nothing
    kindless = {"audit": "collapse", "message": "collapse: ...", "evidence": {}}
    assert split_inherited([kindless], lineage({"vetoes": [kindless]}), "v0") == ([kindless], [])


def test_a_harness_only_revision_carries_the_collapse_of_the_policy_it_shares():
    """A harness revision trains nothing; its own evaluation cannot see dead groups (no rollouts of its own), so
    its verdict has no veto. The policy it holds is v0's, collapsed: a child starts from before it, a plateau is
    not measured on it, and the child's dead groups are v0's kind."""
    records = lineage({"vetoes": [veto("dead_groups")]},
                      v1=record(["v0"], {"event": "judged", "outcome": "insufficient", "vetoes": []}, kind="harness"))
    assert V.harmed_by_training(records, "v1") and V.collapse_veto(records, "v1") == veto("dead_groups")
    assert split_inherited([veto("dead_groups")], records, "v1") == ([], [veto("dead_groups")])
    trained = lineage({"vetoes": [veto("dead_groups")]},
                      v1=record(["v0"], {"event": "judged", "outcome": "insufficient", "vetoes": []}))
    assert not V.harmed_by_training(trained, "v1")  # a policy version that trained past the collapse


def test_an_inherited_collapse_does_not_prune_an_improvement_but_an_own_one_does():
    judged = {"outcome": "improvement", "headline": {"delta": 0.107, "ci_low": 0.086, "ci_high": 0.131, "value": 0.421},
              "progress": {"outcome": "improvement"}, "vetoes": [], "inherited_vetoes": [veto("dead_groups")]}
    decision = decide("v1", judged, harness_only=False, frontier=[], frontier_size=4)
    assert decision.action == Action.PROMOTE
    assert decision.reason.endswith("; collapse (dead_groups): ..., a kind the parent already had (recorded, not deciding)")
    vetoed = {**judged, "vetoes": [veto("dead_groups")], "inherited_vetoes": []}
    assert decide("v1", vetoed, harness_only=False, frontier=[], frontier_size=4).action == Action.PRUNE


def test_a_version_with_an_inherited_collapse_is_still_no_place_to_train_from():
    judged = {"event": "judged", "outcome": "improvement", "vetoes": [], "inherited_vetoes": [veto("dead_groups")]}
    records = {"v1": record(["v0"], judged)}
    assert V.harmed_by_training(records, "v1") and V.collapse_veto(records, "v1") == veto("dead_groups")
    judged["inherited_vetoes"] = []
    assert not V.harmed_by_training(records, "v1") and V.collapse_veto(records, "v1") is None
