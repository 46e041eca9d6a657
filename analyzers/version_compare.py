"""Version layer: paired comparison with the parent and with the promoted head.

Delta Avg@k over common validation tasks with a stratified paired bootstrap
interval (B from settings `search.bootstrap_samples`, seed 0) and a Wilcoxon
p-value, overall and per stratum, plus behavior shifts against the parent
(turn count, truncation) that a score gain can hide (paper D.4: BC% up while
turns doubled).

Findings:
- version.regression_vs_parent (warning): the interval lies below 0; cites the tasks that got worse.
- version.improvement_vs_parent (info): the interval lies above 0.
- version.turn_inflation (warning): mean turns grew by TURN_INFLATION x or more
  while the score did not fall — check the Echo Trap before promoting.
- version.below_promoted (info): the interval against the promoted head lies below 0.
"""

import numpy as np

from evo.harness import kit, stats
from evo.harness.compare import paired_comparison

LAYER = "version"
TURN_INFLATION = 1.5
SEED = 0


def _compare(ctx, other, suffix, metrics):
    B = int(ctx.setting("search.bootstrap_samples", stats.DEFAULT_B))
    result = paired_comparison(ctx.eval, other.eval, B=B, seed=SEED)
    metrics.update({
        f"version/delta_{suffix}": result["delta"],
        f"version/ci_low_{suffix}": result["ci_low"],
        f"version/ci_high_{suffix}": result["ci_high"],
        f"version/p_value_{suffix}": result["p_value"],
        f"version/n_tasks_{suffix}": result["n_tasks"],
    })
    if len(result["per_stratum"]) > 1:
        for stratum, r in result["per_stratum"].items():
            metrics[kit.metric_key(f"version/delta_{suffix}", stratum)] = r["delta"]
    return result


def _mean(table, column):
    return float(kit.col(table, column, np.float64).mean()) if kit.has(table, column) and table.num_rows else None


def analyze(ctx):
    metrics, findings = {}, []
    if ctx.eval is None:
        return kit.empty()
    parent = ctx.parent
    if parent is not None and parent.eval is not None:
        r = _compare(ctx, parent, "vs_parent", metrics)
        text = f"{r['delta']:+.3f} Avg@k vs parent, 95% CI [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}], p={r['p_value']:.3g}, {r['n_tasks']} tasks"
        if r["ci_high"] < 0:
            paired = stats.pair(stats.task_scores(ctx.eval), stats.task_scores(parent.eval))
            worse = paired.child < paired.parent
            findings.append(kit.finding("version.regression_vs_parent", "warning", text,
                                        rows=kit.rows_where(paired.task_ids, worse), values={k: r[k] for k in ("delta", "ci_low", "ci_high", "p_value")}))
        elif r["ci_low"] > 0:
            findings.append(kit.finding("version.improvement_vs_parent", "info", text,
                                        values={k: r[k] for k in ("delta", "ci_low", "ci_high", "p_value")}))
        for table_name in ("eval", "rollouts"):
            child_t, parent_t = getattr(ctx, table_name), getattr(parent, table_name)
            child_turns, parent_turns = _mean(child_t, "turns"), _mean(parent_t, "turns")
            if child_turns is not None and parent_turns:
                metrics["version/turns_ratio_vs_parent"] = child_turns / parent_turns
                if child_turns / parent_turns >= TURN_INFLATION and r["delta"] >= 0 and kit.is_multi_turn(ctx):
                    findings.append(kit.finding(
                        "version.turn_inflation", "warning",
                        f"mean turns {parent_turns:.1f} -> {child_turns:.1f} (x{child_turns / parent_turns:.1f}) while Avg@k moved {r['delta']:+.3f}; "
                        "check the Echo Trap before promoting",
                        values={"turns_parent": parent_turns, "turns_child": child_turns}))
                break
        child_trunc, parent_trunc = _mean(ctx.eval, "truncated"), _mean(parent.eval, "truncated")
        if child_trunc is not None and parent_trunc is not None:
            metrics["version/truncated_frac_delta_vs_parent"] = child_trunc - parent_trunc
    promoted = ctx.promoted
    if promoted is not None and promoted.eval is not None and (parent is None or promoted.run_dir.resolve() != parent.run_dir.resolve()):
        r = _compare(ctx, promoted, "vs_promoted", metrics)
        if r["ci_high"] < 0:
            findings.append(kit.finding("version.below_promoted", "info",
                                        f"{r['delta']:+.3f} Avg@k vs the promoted head, 95% CI [{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]",
                                        values={k: r[k] for k in ("delta", "ci_low", "ci_high", "p_value")}))
    elif promoted is not None and parent is not None and "version/delta_vs_parent" in metrics:
        for key in ("delta", "ci_low", "ci_high", "p_value", "n_tasks"):
            metrics[f"version/{key}_vs_promoted"] = metrics[f"version/{key}_vs_parent"]
    return {"metrics": metrics, "findings": findings}
