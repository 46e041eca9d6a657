"""The GRPO objective (paper appendix A) as pure tensor functions. Imports only torch.

A step samples G trajectories per prompt (a *group*). Trajectory i in group g
has a scalar reward R_i and the group-normalised advantage

    A_i = (R_i - mean_g R) / (std_g R + eps)        (scale_by_std=True)
    A_i =  R_i - mean_g R                           (scale_by_std=False)

with mean/std over the group's trajectories that enter group statistics
(anomaly exclusion may remove some). `std` is the population std (divide by
n, `grpo.advantage_std: population`, the paper's) or the Bessel-corrected
sample std (divide by n - 1, `sample`, what verl and TRL use). Population
advantages are sqrt(n / (n - 1)) larger than sample ones (+41% at n = 2,
+6.9% at n = 8), so under `population` the KL term weighs relatively less. A group whose
population spread is below the filters' tolerance (`zero_spread`, the
StdGroupFilter's epsilon) has every advantage exactly 0: float residue of the
mean (rewards 0.1 x 3) would otherwise leave |A| ~ 1e-10 rows that the engine
computes for nothing and the records show as signal.

For every policy-produced token t of trajectory i (observation tokens are masked out):

    r_t  = exp(logp_t - logp_old_t)                                     token ratio
    k3_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1                   KL to the frozen reference
    L_t  = -min(r_t A_i, clip(r_t, 1 - eps_low, 1 + eps_high) A_i) + kl_coef * k3_t

eps_low = 0.20, eps_high = 0.27 (Clip-Higher) and a weak kl_coef by default.

**Loss aggregation** (`grpo.loss_aggregation`). N* is the set of trajectories
that contribute (kept by the filters, not truncation-masked, at least one
token), T_i the policy tokens of i, G* the groups with a non-empty g* = g ∩ N*:

    paper                    L = 1/|G*| Σ_{g in G*} 1/|g*| Σ_{i in g*} 1/|T_i| Σ_t L_t
    token-mean               L = Σ_{i in N*} Σ_t L_t / Σ_{i in N*} |T_i|          (DAPO; verl token-mean, TRL dapo)
    seq-mean-token-mean      L = 1/|N*| Σ_{i in N*} 1/|T_i| Σ_t L_t               (verl; TRL grpo)
    seq-mean-token-sum-norm  L = Σ_{i in N*} Σ_t L_t / (|N*| T_max)               (Dr. GRPO; TRL dr_grpo)

`paper` (the default) weights groups equally however many trajectories the
filters left in them, and trajectories equally however long; `token-mean`
weights every token equally, so long responses are not diluted (sequence means
bias toward short answers on long chain-of-thought); T_max is a constant, the
recipe's per-episode token budget. Every mode is the same sum with its own
per-trajectory weight on the token mean, L = Σ_i w_i mean_t L_t:

    paper: w_i = 1 / (|G*| |g*|)     token-mean: w_i = |T_i| / Σ|T|
    seq-mean-token-mean: w_i = 1 / |N*|     seq-mean-token-sum-norm: w_i = |T_i| / (|N*| T_max)

That form splits exactly across micro-batches, and across data-parallel ranks
when the batch-wide counts (|G*|, |N*|, Σ|T|; `batch_counts`) are summed over
every rank (`trajectory_weights(..., counts=...)`): groups never span ranks, so
|g*| is always local. A batch in which nothing contributes has loss 0 with no
gradient, so the engine skips the optimizer step and parameters do not move.

A token is counted as clipped when the clip binds in the min: low when
r_t < 1 - eps_low with A_i < 0, high when r_t > 1 + eps_high with A_i > 0.
"""

from __future__ import annotations

import torch


def _dense_groups(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary group labels to 0..K-1."""
    uniq, dense = torch.unique(group_ids, return_inverse=True)  # (K,), (N,)
    return dense, int(uniq.numel())


ADVANTAGE_STDS = ("population", "sample")


def _group_moments(rewards: torch.Tensor, dense: torch.Tensor, k: int, w: torch.Tensor,
                   std: str = "population") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean, std (`population` or `sample`) and population std of float64 `rewards` per group, over rows
    with `w` 1 (w is 0/1). (K,), (K,), (K,); a group of fewer than two rows has std 0."""
    if std not in ADVANTAGE_STDS:
        raise ValueError(f"advantage std {std!r} is not one of {', '.join(ADVANTAGE_STDS)}")
    n = torch.zeros(k, dtype=torch.float64).index_add_(0, dense, w)  # (K,)
    count = n.clamp(min=1.0)  # (K,)
    mean = torch.zeros(k, dtype=torch.float64).index_add_(0, dense, w * rewards) / count  # (K,)
    sq = torch.zeros(k, dtype=torch.float64).index_add_(0, dense, w * (rewards - mean[dense]) ** 2)  # (K,)
    population = (sq / count).sqrt()  # (K,)
    if std == "population":
        return mean, population, population
    sample = torch.where(n > 1, (sq / (n - 1).clamp(min=1.0)).sqrt(), torch.zeros_like(sq))  # (K,)
    return mean, sample, population


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    in_stats: torch.Tensor | None = None,
    *,
    scale_by_std: bool = True,
    eps: float = 1e-6,
    std: str = "population",
    zero_spread: float = 0.0,
) -> torch.Tensor:
    """Group-normalised advantages; 0 for trajectories outside group statistics.

    `std`: `population` or `sample` (module docstring). A group whose population
    spread over its in-statistics rows is below `zero_spread` (pass the
    StdGroupFilter's epsilon) has advantages exactly 0, as the filter would call it.
    """
    rewards = rewards.to(torch.float64)  # (N,)
    if in_stats is None:
        in_stats = torch.ones_like(rewards, dtype=torch.bool)  # (N,)
    dense, k = _dense_groups(group_ids)  # (N,)
    mean, scale, population = _group_moments(rewards, dense, k, in_stats.to(torch.float64), std)  # (K,) x3
    centred = rewards - mean[dense]  # (N,)
    if scale_by_std:
        denom = scale[dense] + eps  # (N,)
        # A zero-spread group has centred == 0: keep it 0 even with eps = 0 (no 0/0 NaN).
        adv = torch.where(denom > 0, centred / denom.clamp(min=1e-300), torch.zeros_like(centred))  # (N,)
    else:
        adv = centred  # (N,)
    signal = in_stats & (population[dense] >= zero_spread)  # (N,)
    return torch.where(signal, adv, torch.zeros_like(adv))  # (N,)


def group_spread(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Population std of reward within each group, in order of sorted group label. (K,)"""
    dense, k = _dense_groups(group_ids)  # (N,)
    rewards = rewards.to(torch.float64)  # (N,)
    return _group_moments(rewards, dense, k, torch.ones_like(rewards))[2]  # (K,)


def live_group_count(group_ids: torch.Tensor, contributes: torch.Tensor) -> int:
    """|G*| of these trajectories: groups with at least one contributing trajectory."""
    return int(batch_counts(group_ids, contributes)[0])


def batch_counts(group_ids: torch.Tensor, contributes: torch.Tensor,
                 tokens: torch.Tensor | None = None) -> list[float]:
    """[|G*|, |N*|, Σ_{i in N*} |T_i|] of these trajectories: what the loss aggregations divide by.

    On a data-parallel rank, sum these over ranks (`Ranks.all_sum`) and pass the
    sums to `trajectory_weights(..., counts=...)`.
    """
    dense, k = _dense_groups(group_ids)  # (N,)
    c = contributes.to(torch.float64)  # (N,)
    per_group = torch.zeros(k, dtype=torch.float64).index_add_(0, dense, c)  # (K,)
    n_tokens = float((c * tokens.to(torch.float64)).sum()) if tokens is not None else 0.0
    return [float((per_group > 0).sum()), float(c.sum()), n_tokens]


def _paper(c, per_group, tokens, counts, token_budget):
    return c / (per_group.clamp(min=1.0) * counts[0])  # (N,) 1 / (|G*| |g*|)


def _token_mean(c, per_group, tokens, counts, token_budget):
    return c * tokens / counts[2]  # (N,) |T_i| / Σ|T|


def _seq_mean_token_mean(c, per_group, tokens, counts, token_budget):
    return c / counts[1]  # (N,) 1 / |N*|


def _seq_mean_token_sum_norm(c, per_group, tokens, counts, token_budget):
    if not token_budget or token_budget <= 0:
        raise ValueError("seq-mean-token-sum-norm needs token_budget (T_max), a positive constant")
    return c * tokens / (counts[1] * float(token_budget))  # (N,) |T_i| / (|N*| T_max)


# mode -> w_i; every function maps (contributes (N,), |g*| at each row (N,), |T_i| (N,), counts, T_max) -> (N,)
LOSS_AGGREGATIONS = {
    "paper": _paper,
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
}


def trajectory_weights(group_ids: torch.Tensor, contributes: torch.Tensor, *, mode: str = "paper",
                       tokens: torch.Tensor | None = None, counts: list[float] | None = None,
                       token_budget: float | None = None, live_groups: int | None = None) -> torch.Tensor:
    """Per-trajectory weights w_i of `mode` (module docstring), 0 for non-contributing rows. (N,)

    `tokens` (N,) are the policy tokens |T_i| (needed by the token modes).
    `counts` are `batch_counts` of the whole batch when these trajectories are
    one rank's shard of it (summed over ranks); the weights of all ranks then
    add up to the one-process weights. Default: the counts of the rows here.
    `live_groups` overrides |G*| alone (the paper mode's older form).
    `token_budget`: T_max of `seq-mean-token-sum-norm`.
    """
    if mode not in LOSS_AGGREGATIONS:
        raise ValueError(f"loss aggregation {mode!r} is not one of {', '.join(LOSS_AGGREGATIONS)}")
    dense, k = _dense_groups(group_ids)  # (N,)
    c = contributes.to(torch.float64)  # (N,)
    if tokens is None:
        if mode not in ("paper", "seq-mean-token-mean"):
            raise ValueError(f"loss aggregation {mode!r} weights trajectories by their tokens; pass tokens")
        tokens = torch.ones_like(c)
    tokens = tokens.to(torch.float64)  # (N,)
    counts = list(counts) if counts is not None else batch_counts(group_ids, contributes, tokens)
    if live_groups is not None:
        counts[0] = float(live_groups)
    if counts[0] == 0 or counts[1] == 0 or (mode == "token-mean" and counts[2] == 0):
        return torch.zeros_like(c)
    per_group = torch.zeros(k, dtype=torch.float64).index_add_(0, dense, c)  # (K,) |g*|
    return LOSS_AGGREGATIONS[mode](c, per_group[dense], tokens, counts, token_budget)  # (N,)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1, >= 0. (N, T)"""
    diff = ref_logp - logp  # (N, T)
    return torch.exp(diff) - diff - 1.0  # (N, T)


def token_losses(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    *,
    ref_logp: torch.Tensor | None = None,
    eps_low: float = 0.20,
    eps_high: float = 0.27,
    kl_coef: float = 0.0,
) -> dict[str, torch.Tensor]:
    """Per-token loss L_t and its parts: ratio, k3, binding-clip masks. Every value (N, T)."""
    adv = advantages.to(logp.dtype)[:, None]  # (N, 1)
    ratio = torch.exp(logp - logp_old)  # (N, T)
    unclipped = ratio * adv  # (N, T)
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv  # (N, T)
    loss = -torch.minimum(unclipped, clipped)  # (N, T)
    kl = k3_kl(logp, ref_logp) if ref_logp is not None else torch.zeros_like(logp)  # (N, T)
    if kl_coef:
        loss = loss + kl_coef * kl  # (N, T)
    return {
        "loss": loss,
        "ratio": ratio,
        "kl": kl,
        "clip_low": (ratio < 1.0 - eps_low) & (adv < 0),  # (N, T)
        "clip_high": (ratio > 1.0 + eps_high) & (adv > 0),  # (N, T)
    }


def masked_row_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of each row over its masked tokens; 0 for rows without tokens. (N,)"""
    m = mask.to(values.dtype)  # (N, T)
    return (values * m).sum(-1) / m.sum(-1).clamp(min=1.0)  # (N,)


def grpo_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    token_mask: torch.Tensor,
    traj_weights: torch.Tensor,
    *,
    ref_logp: torch.Tensor | None = None,
    eps_low: float = 0.20,
    eps_high: float = 0.27,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The batch (or micro-batch) loss Σ_i w_i mean_t L_t, and per-trajectory stats (N,).

    logp, logp_old, ref_logp, token_mask: (N, T); advantages, traj_weights: (N,).
    Pass the weights from `trajectory_weights` over the whole batch so micro-batch
    losses add up to the batch loss.
    """
    parts = token_losses(logp, logp_old, advantages, ref_logp=ref_logp,
                         eps_low=eps_low, eps_high=eps_high, kl_coef=kl_coef)
    mask = token_mask.bool()  # (N, T)
    per_traj = masked_row_mean(parts["loss"], mask)  # (N,)
    weights = traj_weights.to(per_traj.dtype)  # (N,)
    contributing = (weights > 0) & (mask.sum(-1) > 0)  # (N,)
    with torch.no_grad():
        stats = {
            "loss": per_traj.detach(),
            "kl": masked_row_mean(parts["kl"].detach(), mask),
            "clip_frac_low": masked_row_mean(parts["clip_low"].to(logp.dtype), mask),
            "clip_frac_high": masked_row_mean(parts["clip_high"].to(logp.dtype), mask),
            "ratio": masked_row_mean(parts["ratio"].detach(), mask),
        }
    if not bool(contributing.any()):
        # Nothing to learn from: a constant zero, detached, so no gradient and no NaN.
        return torch.zeros((), dtype=logp.dtype, device=logp.device), stats
    # where(), not a zero weight: 0 * inf would still be NaN for a dropped trajectory.
    loss = (weights * torch.where(contributing, per_traj, torch.zeros_like(per_traj))).sum()  # ()
    return loss, stats


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the vocabulary at every position. (N, T, V) -> (N, T)"""
    logz = torch.log_softmax(logits, dim=-1)  # (N, T, V)
    return -(logz.exp() * logz).sum(-1)  # (N, T)


def gather_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) at every position. logits (N, T, V), targets (N, T) -> (N, T)"""
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (N, T)
    return picked - torch.logsumexp(logits, dim=-1)  # (N, T); no (N, T, V) log-softmax copy
