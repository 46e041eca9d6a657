"""Signal layer: advantage, clip-fraction, KL and entropy trends over training.

Trends compare the mean of the first third of logged steps with the last
third (metrics.jsonl; per-step means of the rollout columns when a key was not
logged). Advantage statistics come from the rollouts: the share of
trajectories whose advantage is exactly 0 carries no gradient.

Findings:
- signal.entropy_falling (warning): last-third entropy below ENTROPY_DROP_WARN x
  first-third (exploration is closing; collapse audit vetoes near 0).
- signal.kl_rising (warning): last-third KL above KL_WARN and KL_GROWTH_WARN x first third.
- signal.kl_jump (warning): first-third KL already above KL_JUMP nats: the first
  updates threw the policy far from its reference at once, which a KL that then
  stays high never shows as rising (calc at 10x the learning rate: KL 0 -> 3.0
  after one update, reward 0.55 -> 0.00, and 3.4 -> 3.3 first third to last).
- signal.clip_high (warning): last-third clip_frac_high above CLIP_WARN (updates too large).
- signal.zero_advantage (warning): at least ZERO_ADV_WARN of trajectories have advantage 0.
"""

import numpy as np

from evo.harness import kit

LAYER = "signal"
TREND_KEYS = ("policy/entropy", "policy/kl", "policy/clip_frac_high", "policy/clip_frac_low", "policy/grad_norm", "reward/mean")
ROLLOUT_FALLBACK = {"policy/entropy": "entropy", "policy/kl": "kl", "policy/clip_frac_high": "clip_frac_high",
                    "policy/clip_frac_low": "clip_frac_low", "reward/mean": "reward"}
ENTROPY_DROP_WARN = 0.3
KL_WARN = 0.1
KL_GROWTH_WARN = 3.0
KL_JUMP = 1.0  # ten times KL_WARN, in the first third: runs at the default rate stay near 0.1 there (0.006-0.12)
CLIP_WARN = 0.2
ZERO_ADV_WARN = 0.5


def analyze(ctx):
    metrics, findings = {}, []
    table = ctx.rollouts
    trends = {}
    for key in TREND_KEYS:
        pair = kit.trend(ctx, key, ROLLOUT_FALLBACK.get(key))
        if pair is None:
            continue
        name = key.replace("policy/", "").replace("/", "_")
        first, last = pair
        trends[name] = pair
        metrics[f"signal/{name}_first"] = first
        metrics[f"signal/{name}_last"] = last
        if first != 0:
            metrics[f"signal/{name}_change"] = last / first - 1.0

    if "entropy" in trends and trends["entropy"][0] > 0 and trends["entropy"][1] < ENTROPY_DROP_WARN * trends["entropy"][0]:
        first, last = trends["entropy"]
        findings.append(kit.finding("signal.entropy_falling", "warning",
                                    f"policy entropy fell from {first:.3g} to {last:.3g} ({last / first - 1:+.0%}) between the first and last third of training",
                                    values={"entropy_first": first, "entropy_last": last}))
    if "kl" in trends:
        first, last = trends["kl"]
        if last > KL_WARN and last > KL_GROWTH_WARN * max(first, 1e-12):
            findings.append(kit.finding("signal.kl_rising", "warning",
                                        f"KL to the reference rose from {first:.3g} to {last:.3g}; the policy is drifting fast",
                                        values={"kl_first": first, "kl_last": last}))
        if first > KL_JUMP:
            findings.append(kit.finding("signal.kl_jump", "warning",
                                        f"KL to the reference was already {first:.3g} in the first third of training: "
                                        "the first updates moved the policy far from where it started (lower the learning rate)",
                                        values={"kl_first": first, "kl_last": last}))
    if "clip_frac_high" in trends and trends["clip_frac_high"][1] > CLIP_WARN:
        last = trends["clip_frac_high"][1]
        findings.append(kit.finding("signal.clip_high", "warning",
                                    f"{last:.0%} of tokens hit the upper clip in the last third of training; updates are too large (lower the learning rate)",
                                    values={"clip_frac_high_last": last}))

    if kit.has(table, "advantage") and table.num_rows:
        adv = kit.col(table, "advantage", np.float64)
        zero = adv == 0
        metrics["signal/advantage_abs_mean"] = float(np.abs(adv).mean())
        metrics["signal/zero_advantage_frac"] = kit.frac(zero)
        if kit.has(table, "kept"):
            metrics["signal/kept_frac"] = kit.frac(kit.col(table, "kept", bool))
        if metrics["signal/zero_advantage_frac"] >= ZERO_ADV_WARN:
            findings.append(kit.finding("signal.zero_advantage", "warning",
                                        f"{metrics['signal/zero_advantage_frac']:.0%} of trajectories have advantage 0 and carry no gradient",
                                        rows=kit.rows_where(table.column("traj_id"), zero),
                                        values={"zero_advantage_frac": metrics["signal/zero_advantage_frac"]}))
    return {"metrics": metrics, "findings": findings}
