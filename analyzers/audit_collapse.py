"""Audit: behavioral collapse — states no score makes acceptable.

(The judge records a collapse of a kind the parent's policy already had as
inherited, not deciding: `evo.loop.judge.split_inherited`. This audit only
reports what the version's own run shows.)

Vetoes the version when any holds (recent = last third of training steps):

- *one-turn degeneration*: in a multi-turn domain (recipe `domain.options.max_turns`
  > 1, domain swe/sandbox, or the parent used several turns or was cut off by
  its turn limit) whose own recipe allows more than one turn, at least
  ONE_TURN_COLLAPSE of recent training or validation episodes take one turn
  (paper D.5: an efficiency factor drove SWE to one-turn behavior and BC% ~ 0);
- *runaway turn counts*: at least RUNAWAY_MAX_TURNS of recent training or
  validation episodes end at the turn limit;
- *entropy collapse*: last-third policy entropy below ENTROPY_COLLAPSE_RATIO x
  the first third (needs at least 3 logged steps);
- *near-total dead groups*: at least DEAD_COLLAPSE of recent groups (and at
  least MIN_GROUPS of them) have no reward spread.
"""

import numpy as np

from evo.harness import kit

LAYER = "behavior"
AUDIT = True
NAME = "collapse"
ONE_TURN_COLLAPSE = 0.9
RUNAWAY_MAX_TURNS = 0.8
ENTROPY_COLLAPSE_RATIO = 0.05
DEAD_COLLAPSE = 0.95
DEAD_EPSILON = 1e-6
MIN_GROUPS = 8


def _declared_multi_turn(ctx):
    # Not this run's own turns: a run that collapsed to one turn would read as single-turn.
    parent = ctx.parent
    return kit.is_multi_turn(ctx, (parent.rollouts, parent.eval) if parent is not None else ())


def _recent_rows(ctx):
    g = kit.groups(ctx)
    return g.broadcast(g.recent()) if g is not None else None


def _turn_checks(ctx, recent, collapse):
    multi = _declared_multi_turn(ctx) and kit.turn_limit(ctx) != 1  # under `max_turns: 1` one turn is the recipe's
    for table, ids_col, where, scope in ((ctx.rollouts, "traj_id", "recent training", recent), (ctx.eval, "task_id", "validation", None)):
        if not kit.has(table, "turns") or table.num_rows == 0:
            continue
        scope = np.ones(table.num_rows, bool) if scope is None else scope
        turns = kit.col(table, "turns", np.int64)
        ids = table.column(ids_col)
        one_turn = (turns <= 1) & scope
        share = one_turn.sum() / max(scope.sum(), 1)
        if multi and share >= ONE_TURN_COLLAPSE:
            collapse("one_turn", f"{share:.0%} of {where} episodes take a single turn in a multi-turn domain",
                     kit.rows_where(ids, one_turn), {"one_turn_frac": float(share)})
            return
        if kit.has(table, "finish_reason"):
            at_limit = kit.text_eq(table, "finish_reason", "max_turns") & scope
            share = at_limit.sum() / max(scope.sum(), 1)
            if share >= RUNAWAY_MAX_TURNS:
                collapse("runaway_turns", f"{share:.0%} of {where} episodes run to the turn limit (mean {turns[scope].mean():.1f} turns)",
                         kit.rows_where(ids, at_limit), {"max_turns_frac": float(share)})
                return


def analyze(ctx):
    findings, vetoes = [], []

    def collapse(kind, message, rows, values):
        text = f"collapse ({kind}): {message}"
        findings.append(kit.finding(f"behavior.collapse_{kind}", "critical", text, rows=rows, values=values))
        vetoes.append({"audit": NAME, "message": text, "evidence": {"kind": kind, "rows": rows, **values}})

    recent = _recent_rows(ctx)
    _turn_checks(ctx, recent, collapse)

    entropy = kit.trend(ctx, "policy/entropy", "entropy")
    if entropy is not None and entropy[0] > 0 and entropy[1] < ENTROPY_COLLAPSE_RATIO * entropy[0]:
        collapse("entropy", f"policy entropy fell from {entropy[0]:.3g} to {entropy[1]:.3g} (below {ENTROPY_COLLAPSE_RATIO:.0%} of its start)",
                 [], {"entropy_first": entropy[0], "entropy_last": entropy[1]})

    g = kit.groups(ctx)
    if g is not None and kit.has(ctx.rollouts, "reward"):
        dead = g.std(kit.col(ctx.rollouts, "reward", np.float64)) <= DEAD_EPSILON
        recent_groups = g.recent()
        share = float(dead[recent_groups].mean())
        if recent_groups.sum() >= MIN_GROUPS and share >= DEAD_COLLAPSE:
            collapse("dead_groups", f"{share:.0%} of {int(recent_groups.sum())} recent groups have no reward spread",
                     kit.rows_where(ctx.rollouts.column("traj_id"), g.broadcast(dead & recent_groups)), {"dead_group_ratio_recent": share})
    return {"metrics": {"behavior/collapse_vetoes": len(vetoes)}, "findings": findings, "vetoes": vetoes}
