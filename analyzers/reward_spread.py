"""Signal layer: reward spread within groups, for the total and every stored component.

The mean within-group std is the size of the learning signal GRPO sees. Per
component, it shows which parts of the reward actually separate trajectories;
inside groups that are dead on the total reward, a component that still varies
is a candidate signal that a reward change could recover (backtest it with
`evo backtest`).

Findings:
- signal.latent_spread (info): a stored component varies within at least
  LATENT_INFO of the dead groups; cites trajectories of those groups.
"""

import numpy as np

from evo.harness import kit

LAYER = "signal"
DEAD_EPSILON = 1e-6
LATENT_INFO = 0.2


def analyze(ctx):
    g = kit.groups(ctx)
    table = ctx.rollouts
    if g is None or not kit.has(table, "reward"):
        return kit.empty()
    reward_std = g.std(kit.col(table, "reward", np.float64))  # (groups,)
    dead = reward_std <= DEAD_EPSILON
    metrics = {"signal/reward_spread": float(reward_std.mean())}
    in_recipe = {t.get("name"): t for t in ((ctx.recipe or {}).get("reward") or {}).get("terms", [])}
    findings = []
    ids = None
    for name in kit.components(table):
        comp_std = g.std(kit.col(table, f"reward/{name}", np.float64))  # (groups,)
        metrics[kit.metric_key("signal/reward_spread", name)] = float(comp_std.mean())
        if not dead.any():
            continue
        alive_inside = dead & (comp_std > DEAD_EPSILON)
        share = float(alive_inside.sum() / dead.sum())
        metrics[kit.metric_key("signal/spread_in_dead_groups", name)] = share
        if share >= LATENT_INFO:
            ids = table.column("traj_id") if ids is None else ids
            term = in_recipe.get(name)
            status = "not in reward.terms" if term is None else f"in reward.terms as {term.get('mode', 'add')} weight {term.get('weight', 1.0)}"
            findings.append(kit.finding(
                "signal.latent_spread", "info",
                f"component {name!r} ({status}) varies within {share:.0%} of the {int(dead.sum())} dead groups; "
                "backtest a reward change that uses it",
                rows=kit.rows_where(ids, g.broadcast(alive_inside)), values={"component": name, "share_of_dead_groups": share}))
    return {"metrics": metrics, "findings": findings}
