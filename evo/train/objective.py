"""The GRPO objective (paper appendix A) as pure tensor functions. Imports only torch.

A step samples G trajectories per prompt (a *group*). Trajectory i in group g
has a scalar reward R_i and the group-normalised advantage

    A_i = (R_i - mean_g R) / (std_g R + eps)        (scale_by_std=True)
    A_i =  R_i - mean_g R                           (scale_by_std=False)

with mean/std (population std) over the group's trajectories that enter group
statistics (anomaly exclusion may remove some). For every policy-produced token
t of trajectory i (observation tokens are masked out):

    r_t  = exp(logp_t - logp_old_t)                                     token ratio
    k3_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1                   KL to the frozen reference
    L_t  = -min(r_t A_i, clip(r_t, 1 - eps_low, 1 + eps_high) A_i) + kl_coef * k3_t

eps_low = 0.20, eps_high = 0.27 (Clip-Higher) and a weak kl_coef by default.
The batch loss averages tokens within a trajectory, trajectories within a
group, then groups:

    L = 1/|G*| Σ_{g in G*} 1/|g*| Σ_{i in g*} 1/|T_i| Σ_{t in T_i} L_t

where g* is the set of trajectories of g that contribute (kept by the filters,
not truncation-masked, at least one token) and G* the groups with a non-empty
g*. Equivalently each trajectory carries the weight w_i = 1 / (|G*| |g*|) and
L = Σ_i w_i mean_t L_t; that form splits exactly across micro-batches, and
across data-parallel ranks when |G*| counts the live groups of every rank
(`trajectory_weights(..., live_groups=...)`: groups never span ranks, so |g*|
is always local). A batch in which nothing contributes has loss 0 with no
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


def _group_moments(rewards: torch.Tensor, dense: torch.Tensor, k: int,
                   w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and population std of float64 `rewards` per group, over rows with `w` 1 (w is 0/1). (K,), (K,)"""
    count = torch.zeros(k, dtype=torch.float64).index_add_(0, dense, w).clamp(min=1.0)  # (K,)
    mean = torch.zeros(k, dtype=torch.float64).index_add_(0, dense, w * rewards) / count  # (K,)
    sq = torch.zeros(k, dtype=torch.float64).index_add_(0, dense, w * (rewards - mean[dense]) ** 2)  # (K,)
    return mean, (sq / count).sqrt()  # (K,), (K,)


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    in_stats: torch.Tensor | None = None,
    *,
    scale_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Group-normalised advantages; 0 for trajectories outside group statistics."""
    rewards = rewards.to(torch.float64)  # (N,)
    if in_stats is None:
        in_stats = torch.ones_like(rewards, dtype=torch.bool)  # (N,)
    dense, k = _dense_groups(group_ids)  # (N,)
    mean, std = _group_moments(rewards, dense, k, in_stats.to(torch.float64))  # (K,), (K,)
    centred = rewards - mean[dense]  # (N,)
    if scale_by_std:
        denom = std[dense] + eps  # (N,)
        # A zero-spread group has centred == 0: keep it 0 even with eps = 0 (no 0/0 NaN).
        adv = torch.where(denom > 0, centred / denom.clamp(min=1e-300), torch.zeros_like(centred))  # (N,)
    else:
        adv = centred  # (N,)
    return torch.where(in_stats, adv, torch.zeros_like(adv))  # (N,)


def group_spread(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Population std of reward within each group, in order of sorted group label. (K,)"""
    dense, k = _dense_groups(group_ids)  # (N,)
    rewards = rewards.to(torch.float64)  # (N,)
    return _group_moments(rewards, dense, k, torch.ones_like(rewards))[1]  # (K,)


def live_group_count(group_ids: torch.Tensor, contributes: torch.Tensor) -> int:
    """|G*| of these trajectories: groups with at least one contributing trajectory."""
    dense, k = _dense_groups(group_ids)  # (N,)
    per_group = torch.zeros(k, dtype=torch.float64).index_add_(0, dense, contributes.to(torch.float64))  # (K,)
    return int((per_group > 0).sum())


def trajectory_weights(group_ids: torch.Tensor, contributes: torch.Tensor, *,
                       live_groups: int | None = None) -> torch.Tensor:
    """w_i = 1 / (|G*| |g*|) for contributing trajectories, 0 otherwise; sums to 1 (or 0). (N,)

    `live_groups` is |G*| of the whole batch when these trajectories are one
    rank's shard of it (the sum of every rank's `live_group_count`); the
    weights of all ranks then sum to 1 together. Default: the groups here.
    """
    dense, k = _dense_groups(group_ids)  # (N,)
    c = contributes.to(torch.float64)  # (N,)
    per_group = torch.zeros(k, dtype=torch.float64).index_add_(0, dense, c)  # (K,) |g*|
    if live_groups is None:
        live_groups = int((per_group > 0).sum())  # |G*|
    if live_groups == 0:
        return torch.zeros_like(c)
    w = c / (per_group[dense].clamp(min=1.0) * live_groups)  # (N,)
    return w


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
