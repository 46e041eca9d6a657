"""Behavior layer: repetition and the Echo Trap.

Repetition of a trajectory is its distinct-n-gram ratio over `completion_tokens`
(distinct 4-grams / all 4-grams; 1.0 = nothing repeats). A trajectory is
*repetitive* below REPETITIVE_RATIO (only rows with at least MIN_TOKENS tokens
are judged).

The Echo Trap (RAGEN; paper D.4) is a repetitive trajectory that is also *long*
(num_tokens >= LONG_FACTOR x the run's median, or turns >= LONG_FACTOR x the
median turns in multi-turn domains) and *competitive* (reward > 0 and at least
its group's mean): the reward keeps paying for a degenerate loop, so the
headline can rise while behavior collapses.

Findings:
- behavior.echo_trap (warning at ECHO_WARN, critical at ECHO_CRITICAL of recent
  trajectories): cites the echo-trapped traj_ids.
- behavior.repetition (info): at least REPETITION_INFO of trajectories are repetitive.
"""

import numpy as np

from evo.harness import kit

LAYER = "behavior"
NGRAM = 4
MIN_TOKENS = 16
REPETITIVE_RATIO = 0.5
LONG_FACTOR = 2.0
ECHO_WARN = 0.05
ECHO_CRITICAL = 0.20
REPETITION_INFO = 0.10


def analyze(ctx):
    table = ctx.rollouts
    stats = kit.ngrams(ctx, NGRAM)
    g = kit.groups(ctx)
    if stats is None or g is None or not kit.has(table, "reward"):
        return kit.empty()
    lengths = kit.col(table, "num_tokens", np.int64) if kit.has(table, "num_tokens") else stats.ngrams + NGRAM - 1
    judged = lengths >= MIN_TOKENS
    ratio = stats.distinct_ratio  # (rows,)
    repetitive = judged & (ratio < REPETITIVE_RATIO)
    long = lengths >= LONG_FACTOR * max(float(np.median(lengths)), 1.0)
    if kit.has(table, "turns") and kit.is_multi_turn(ctx):
        turns = kit.col(table, "turns", np.int64)
        long |= turns >= LONG_FACTOR * max(float(np.median(turns)), 1.0)
    reward = kit.col(table, "reward", np.float64)
    competitive = (reward > 0) & (reward >= g.broadcast(g.mean(reward)) - 1e-12)
    echo = repetitive & long & competitive
    recent = g.broadcast(g.recent())
    metrics = {
        "behavior/distinct_ngram_ratio_mean": float(ratio[judged].mean()) if judged.any() else 1.0,
        "behavior/repetitive_frac": kit.frac(repetitive),
        "behavior/echo_trap_frac": kit.frac(echo),
        "behavior/echo_trap_frac_recent": kit.frac(echo[recent]),
        "behavior/echo_trap_count": int(echo.sum()),
    }
    findings = []
    ids = None
    rate = metrics["behavior/echo_trap_frac_recent"]
    if rate >= ECHO_WARN:
        ids = table.column("traj_id")
        severity = "critical" if rate >= ECHO_CRITICAL else "warning"
        findings.append(kit.finding(
            "behavior.echo_trap", severity,
            f"{rate:.0%} of recent trajectories are long, repetitive and still rewarded (Echo Trap; "
            f"{int(echo.sum())} in total, median length {np.median(lengths[echo]):.0f} vs {np.median(lengths):.0f} tokens)",
            rows=kit.rows_where(ids, echo & recent), values={"echo_trap_frac_recent": rate, "echo_trap_count": int(echo.sum())}))
    if metrics["behavior/repetitive_frac"] >= REPETITION_INFO:
        ids = table.column("traj_id") if ids is None else ids
        findings.append(kit.finding(
            "behavior.repetition", "info",
            f"{metrics['behavior/repetitive_frac']:.0%} of trajectories repeat most of their {NGRAM}-grams",
            rows=kit.rows_where(ids, repetitive), values={"repetitive_frac": metrics["behavior/repetitive_frac"]}))
    return {"metrics": metrics, "findings": findings}
