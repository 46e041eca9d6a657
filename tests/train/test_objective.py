"""The GRPO objective against hand-computed values."""

import math

import pytest
import torch

from evo.train.objective import (
    group_advantages,
    grpo_loss,
    k3_kl,
    token_losses,
    trajectory_weights,
)


def _logp(ratios):
    return torch.log(torch.tensor(ratios, dtype=torch.float64))


def test_clip_binds_above_for_positive_and_below_for_negative_advantage():
    # old logp = 0, so ratio = exp(logp).
    logp = _logp([[1.5, 0.5, 1.1], [1.5, 0.5, 0.9]]).requires_grad_(True)
    old = torch.zeros_like(logp)
    parts = token_losses(logp, old, torch.tensor([1.0, -1.0]), eps_low=0.2, eps_high=0.27)
    expected = torch.tensor([[-1.27, -0.5, -1.1], [1.5, 0.8, 0.9]], dtype=torch.float64)
    assert torch.allclose(parts["loss"], expected)
    assert parts["clip_high"].tolist() == [[True, False, False], [False, False, False]]
    assert parts["clip_low"].tolist() == [[False, False, False], [False, True, False]]
    parts["loss"].sum().backward()
    # Clipped tokens pass no gradient; the others get -A * r.
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.5, -1.1], [1.5, 0.0, 0.9]], dtype=torch.float64))


def test_clip_higher_is_asymmetric():
    logp = _logp([[1.25, 0.78]])
    parts = token_losses(logp, torch.zeros_like(logp), torch.tensor([1.0]), eps_low=0.2, eps_high=0.27)
    assert not parts["clip_high"].any()  # 1.25 < 1.27: inside the wider upper band
    parts = token_losses(logp, torch.zeros_like(logp), torch.tensor([-1.0]), eps_low=0.2, eps_high=0.27)
    assert parts["clip_low"].tolist() == [[False, True]]  # 0.78 < 0.80


def test_k3_kl_term():
    logp = torch.log(torch.tensor([[0.5]], dtype=torch.float64))
    ref = torch.log(torch.tensor([[0.25]], dtype=torch.float64))
    expected = 0.5 + math.log(2) - 1  # exp(ref-logp) - (ref-logp) - 1
    assert k3_kl(logp, ref).item() == pytest.approx(expected)
    assert k3_kl(logp, logp).item() == 0.0
    loss, stats = grpo_loss(logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 1), torch.tensor([1.0]),
                            ref_logp=ref, kl_coef=0.1)
    assert loss.item() == pytest.approx(0.1 * expected)
    assert stats["kl"].item() == pytest.approx(expected)


def test_three_level_average_with_unequal_groups():
    # With A = -1 and ratios >= 0.8 the token loss equals the ratio, so we can dial token losses.
    # group 0: a = [1, 3] (mean 2), b = [4] (mean 4); group 1: c = [3, 6, 9] (mean 6), d dropped.
    ratios = [[1, 3, 1], [4, 1, 1], [3, 6, 9], [50, 50, 50]]
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1]])
    groups = torch.tensor([0, 0, 1, 1])
    weights = trajectory_weights(groups, torch.tensor([True, True, True, False]))
    assert weights.tolist() == pytest.approx([0.25, 0.25, 0.5, 0.0])
    logp = _logp(ratios)
    adv = torch.full((4,), -1.0)
    loss, stats = grpo_loss(logp, torch.zeros_like(logp), adv, mask, weights)
    # 1/2 * ((2 + 4) / 2 + 6 / 1) = 4.5 (token mean would be 26/6, trajectory mean 4)
    assert loss.item() == pytest.approx(4.5)
    assert stats["loss"][:3].tolist() == pytest.approx([2.0, 4.0, 6.0])
    # Micro-batches with batch-level weights add up to the batch loss exactly.
    parts = [grpo_loss(logp[s], torch.zeros_like(logp[s]), adv[s], mask[s], weights[s])[0]
             for s in (slice(0, 1), slice(1, 3), slice(3, 4))]
    assert sum(p.item() for p in parts) == pytest.approx(4.5)


def test_dropped_trajectory_with_infinite_loss_contributes_nothing():
    logp = torch.tensor([[0.0], [float("inf")]], dtype=torch.float64)
    weights = trajectory_weights(torch.tensor([0, 1]), torch.tensor([True, False]))
    loss, _ = grpo_loss(logp, torch.zeros_like(logp), torch.tensor([-1.0, -1.0]), torch.ones(2, 1), weights)
    assert loss.item() == pytest.approx(1.0)


def test_all_filtered_batch_gives_zero_loss_without_gradient():
    logp = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    weights = trajectory_weights(torch.tensor([0, 0, 1]), torch.tensor([False, False, False]))
    assert weights.tolist() == [0.0, 0.0, 0.0]
    loss, stats = grpo_loss(logp, logp.detach(), torch.ones(3), torch.ones(3, 4), weights, kl_coef=0.1,
                            ref_logp=torch.zeros(3, 4, dtype=torch.float64))
    assert loss.item() == 0.0
    assert not loss.requires_grad
    assert not torch.isnan(stats["kl"]).any()


def test_group_advantages_centre_and_scale_within_groups():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    adv = group_advantages(rewards, groups, eps=0.0)
    assert adv.tolist() == pytest.approx([1.0, -1.0, -1.0, 1.0, 0.0, 0.0])
    adv = group_advantages(rewards, groups, scale_by_std=False)
    assert adv.tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0.0, 0.0])
    # A trajectory outside group statistics gets 0 and does not move its group's mean.
    adv = group_advantages(torch.tensor([3.0, 1.0, 0.0]), torch.tensor([7, 7, 7]),
                           torch.tensor([False, True, True]), scale_by_std=False)
    assert adv.tolist() == pytest.approx([0.0, 0.5, -0.5])


@pytest.mark.parametrize("bucket_overhead", [None, 0.0])  # default split; one length bucket per distinct length
def test_prefix_shared_forward_matches_full_sequences(tiny_model_dir, monkeypatch, bucket_overhead):
    """Prompt once per group + response on its cache = the plain forward, values and gradients."""
    from evo.train import forward
    from evo.train.forward import build_batch, length_buckets, response_logits
    from evo.train.objective import gather_logprobs
    from evo.train.policy import load_policy
    from evo.train.types import Trajectory

    policy = load_policy(str(tiny_model_dir))
    model, tok = policy.model, policy.tokenizer
    model.train()
    enc = lambda s: tok(s, add_special_tokens=False).input_ids  # noqa: E731
    specs = [("1+1=", "2\n", 0), ("1+1=", "33\n", 0), ("123+456=", "579\n", 1), ("123+456=", "5", 1),
             ("7=", "abcdefg", 2),
             ("1+1=", "33\n", 0), ("7=", "abcdefg", 2)]  # duplicates: computed once, gradients still add up
    trajs = [Trajectory("t", "s", g, i, p, enc(p), enc(r), [1] * len(r), r, "eos", False)
             for i, (p, r, g) in enumerate(specs)]
    trajs[4].response_mask = [1, 1, 0, 0, 1, 1, 1]  # observation tokens in the middle (not in its duplicate)
    batch = build_batch(trajs, [1.0] * 7, [0.2] * 7, tok.pad_token_id)
    assert len(batch.prompts) == 3
    if bucket_overhead is not None:
        monkeypatch.setattr(forward, "BUCKET_OVERHEAD", bucket_overhead)
        assert length_buckets([len(t.response_ids) for t in trajs[:5]]) == [[4], [2], [1], [0], [3]]
    logits, targets, mask = response_logits(model, batch, list(range(7)))
    shared = gather_logprobs(logits, targets)  # (7, R)
    (shared * mask).sum().backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()
    total = 0
    for i, t in enumerate(trajs):
        ids = torch.tensor([t.prompt_ids + t.response_ids])
        full = gather_logprobs(model(input_ids=ids).logits[:, :-1].float(), ids[:, 1:])[0, len(t.prompt_ids) - 1:]
        assert torch.allclose(full, shared[i, : len(full)], atol=1e-5)
        assert mask[i].tolist()[: len(full)] == [bool(m) for m in t.response_mask]
        total = total + (full * torch.tensor(t.response_mask)).sum()
    total.backward()
    for k, p in model.named_parameters():
        assert torch.allclose(grads[k], p.grad, atol=1e-5), k


def test_length_buckets_cover_every_row_once_and_split_only_when_it_saves_work():
    from evo.train.forward import length_buckets

    lengths = [1, 2, 3, 4, 5, 6, 7, 8] * 16
    buckets = length_buckets(lengths)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
    assert 1 < len(buckets) < 8
    assert buckets[-1] == [i for i, x in enumerate(lengths) if x == 1]  # no response forward needed
    maxima = [max(lengths[i] for i in b) for b in buckets]
    assert maxima == sorted(maxima, reverse=True)  # contiguous in length, longest first
    assert length_buckets([5, 6, 5, 6]) == [[0, 1, 2, 3]]  # a split would save less than a forward costs
    assert length_buckets([5, 6, 5, 6], overhead=0.0) == [[1, 3], [0, 2]]


def test_micro_batches_never_span_two_segments_and_keep_each_segments_order():
    """One process computes segment 0's rows, then segment 1's, each cut as the rank that samples it cuts them."""
    from evo.train.forward import micro_batches

    segments = [0, 0, 1, 1, 0, 0, 1, 1, 0]  # groups of two rows, alternately sampled by rank 0 and rank 1
    assert micro_batches(segments, 3) == [[0, 1, 4], [5, 8], [2, 3, 6], [7]]
    assert micro_batches([0, 1, 0, 1], 64) == [[0, 2], [1, 3]]
    assert micro_batches([1, 1, 1], 2) == [[0, 1], [2]]  # a rank of a two-rank run: its own segment only
    assert micro_batches([0] * 5, 2) == [[0, 1], [2, 3], [4]] and micro_batches([], 8) == []
