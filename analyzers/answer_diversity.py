"""Signal layer: answer diversity within groups (distinct answers / group size).

When every sample of a group converges on the same final answer, the group
stops exploring: diversity near 1/G precedes dead groups and collapse. The
empty answer ("" = none extracted) counts as one answer value.

Findings:
- signal.low_diversity (warning): mean diversity in recent steps below
  DIVERSITY_WARN; cites trajectories of single-answer groups.
"""

import numpy as np

from evo.harness import kit

LAYER = "signal"
DIVERSITY_WARN = 0.25


def analyze(ctx):
    g = kit.groups(ctx)
    table = ctx.rollouts
    if g is None or not kit.has(table, "answer"):
        return kit.empty()
    import pyarrow.compute as pc

    codes = pc.dictionary_encode(table.column("answer").combine_chunks()).indices.to_numpy(zero_copy_only=False).astype(np.int64)  # (rows,)
    n_codes = int(codes.max()) + 1 if len(codes) else 1
    pairs = np.sort(g.gid * n_codes + codes)  # (rows,) one key per (group, answer)
    first = np.concatenate(([True], pairs[1:] != pairs[:-1]))  # first occurrence of each distinct pair
    distinct = np.bincount(pairs[first] // n_codes, minlength=g.n_groups)  # (groups,)
    diversity = distinct / g.sizes
    recent = g.recent()
    metrics = {
        "signal/answer_diversity": float(diversity.mean()),
        "signal/answer_diversity_recent": float(diversity[recent].mean()),
        "signal/single_answer_group_frac": kit.frac(distinct == 1),
    }
    findings = []
    if metrics["signal/answer_diversity_recent"] < DIVERSITY_WARN:
        single = g.broadcast((distinct == 1) & recent)
        findings.append(kit.finding(
            "signal.low_diversity", "warning",
            f"recent groups give {metrics['signal/answer_diversity_recent']:.2f} distinct answers per sample; "
            f"{metrics['signal/single_answer_group_frac']:.0%} of groups agree on one answer",
            rows=kit.rows_where(table.column("traj_id"), single),
            values={"answer_diversity_recent": metrics["signal/answer_diversity_recent"]}))
    return {"metrics": metrics, "findings": findings}
