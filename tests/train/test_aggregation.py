"""Loss aggregation modes, the advantage std and zero spread, against hand-computed values and references."""

import math

import pytest
import torch

from evo.train.objective import LOSS_AGGREGATIONS, batch_counts, group_advantages, grpo_loss, trajectory_weights

# With A = -1 and ratios >= 0.8 the token loss equals the ratio, so token losses can be dialled.
# group 0: a = [1, 3], b = [4]; group 1: c = [3, 6, 9], d = [50, 50, 50] dropped by a filter.
RATIOS = [[1, 3, 1], [4, 1, 1], [3, 6, 9], [50, 50, 50]]
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1]])
GROUPS = torch.tensor([0, 0, 1, 1])
CONTRIBUTES = torch.tensor([True, True, True, False])
TOKENS = MASK.sum(-1)
T_MAX = 5
EXPECTED = {
    "paper": 0.5 * ((2 + 4) / 2 + 6),  # 4.5: group means of trajectory means
    "token-mean": (1 + 3 + 4 + 3 + 6 + 9) / 6,  # 26/6: every token once
    "seq-mean-token-mean": (2 + 4 + 6) / 3,  # 4: trajectory means
    "seq-mean-token-sum-norm": (4 + 4 + 18) / (3 * T_MAX),  # 26/15: token sums over |N*| T_max
}


def _logp(ratios):
    return torch.log(torch.tensor(ratios, dtype=torch.float64))


def _loss(mode, logp, adv, mask=MASK, groups=GROUPS, contributes=CONTRIBUTES, **kw):
    weights = trajectory_weights(groups, contributes, mode=mode, tokens=mask.sum(-1), token_budget=T_MAX)
    return grpo_loss(logp, torch.zeros_like(logp), adv, mask, weights, **kw)[0], weights


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_each_mode_against_hand_computed_values_with_unequal_groups(mode):
    logp = _logp(RATIOS)
    loss, weights = _loss(mode, logp, torch.full((4,), -1.0))
    assert loss.item() == pytest.approx(EXPECTED[mode])
    assert weights[3] == 0.0  # the dropped trajectory weighs nothing in every mode
    # Micro-batches with batch-level weights add up to the batch loss exactly.
    parts = [grpo_loss(logp[s], torch.zeros_like(logp[s]), torch.full((4,), -1.0)[s], MASK[s], weights[s])[0]
             for s in (slice(0, 1), slice(1, 3), slice(3, 4))]
    assert sum(p.item() for p in parts) == pytest.approx(EXPECTED[mode])


@pytest.mark.parametrize("mode", sorted(LOSS_AGGREGATIONS))
def test_a_fully_filtered_batch_has_zero_loss_and_no_gradient_in_every_mode(mode):
    logp = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    weights = trajectory_weights(GROUPS, torch.zeros(4, dtype=torch.bool), mode=mode, tokens=TOKENS,
                                 token_budget=T_MAX)
    assert weights.tolist() == [0.0] * 4
    loss, _ = grpo_loss(logp, logp.detach(), torch.ones(4), MASK, weights)
    assert loss.item() == 0.0 and not loss.requires_grad


def test_token_mean_equals_a_flat_masked_token_mean_written_here():
    """A reference that knows nothing of weights: clip loss per token, summed over kept tokens / their count."""
    gen = torch.Generator().manual_seed(7)
    n, t = 12, 9
    logp = -torch.rand(n, t, generator=gen, dtype=torch.float64) * 3
    old = logp + (torch.rand(n, t, generator=gen, dtype=torch.float64) - 0.5) * 0.8  # ratios 0.67 .. 1.5
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).long()  # (n, t) right-padded responses
    groups = torch.arange(n) // 3
    contributes = torch.rand(n, generator=gen) > 0.25
    weights = trajectory_weights(groups, contributes, mode="token-mean", tokens=mask.sum(-1))
    ours, _ = grpo_loss(logp, old, adv, mask, weights, eps_low=0.2, eps_high=0.27)

    total, count = 0.0, 0
    for i in range(n):
        if not contributes[i]:
            continue
        for j in range(t):
            if mask[i, j]:
                r = math.exp(float(logp[i, j] - old[i, j]))
                a = float(adv[i])
                total += -min(r * a, min(max(r, 0.8), 1.27) * a)
                count += 1
    assert ours.item() == pytest.approx(total / count, abs=1e-12)


@pytest.mark.parametrize("mode", sorted(LOSS_AGGREGATIONS))
def test_rank_shards_with_summed_counts_give_the_one_process_weights(mode):
    """Data parallel: groups never span ranks; every rank's weights from the all-reduced counts."""
    gen = torch.Generator().manual_seed(3)
    groups = torch.arange(24) // 4  # 6 groups of 4
    contributes = torch.rand(24, generator=gen) > 0.3
    contributes[8:12] = False  # one group filtered whole
    tokens = torch.randint(1, 20, (24,), generator=gen)
    whole = trajectory_weights(groups, contributes, mode=mode, tokens=tokens, token_budget=32)
    for world in (2, 3):
        shards = [torch.tensor([i for i in range(24) if int(groups[i]) % world == r]) for r in range(world)]
        counts = [sum(c) for c in zip(*(batch_counts(groups[s], contributes[s], tokens[s]) for s in shards))]
        split = torch.zeros(24, dtype=torch.float64)
        for s in shards:
            split[s] = trajectory_weights(groups[s], contributes[s], mode=mode, tokens=tokens[s], counts=counts,
                                          token_budget=32)
        assert torch.allclose(split, whole, rtol=0, atol=1e-15), (mode, world)
    assert float(whole.sum()) == pytest.approx(1.0) or mode == "seq-mean-token-sum-norm"


def test_token_modes_need_tokens_and_sum_norm_a_budget():
    with pytest.raises(ValueError, match="pass tokens"):
        trajectory_weights(GROUPS, CONTRIBUTES, mode="token-mean")
    with pytest.raises(ValueError, match="token_budget"):
        trajectory_weights(GROUPS, CONTRIBUTES, mode="seq-mean-token-sum-norm", tokens=TOKENS)
    with pytest.raises(ValueError, match="is not one of"):
        trajectory_weights(GROUPS, CONTRIBUTES, mode="sequence")


def test_sample_std_scales_advantages_by_the_bessel_factor():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1, 1, 1, 1, 1])
    pop = group_advantages(rewards, groups, eps=0.0)
    sample = group_advantages(rewards, groups, eps=0.0, std="sample")
    assert torch.allclose(pop[:2], sample[:2] * math.sqrt(2))  # n = 2: population advantages 41% larger
    assert sample[:2].tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)])  # verl / TRL: (r - mean) / std_unbiased
    assert torch.allclose(pop[2:], sample[2:] * math.sqrt(6 / 5))  # n = 6
    # A group of one in statistics has no spread under either std: advantage 0, not NaN.
    one = group_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), torch.tensor([True, False]), std="sample")
    assert one.tolist() == [0.0, 0.0]


def test_zero_spread_is_decided_with_the_filters_tolerance():
    rewards = torch.tensor([0.1, 0.1, 0.1, 1.0, 0.0, 0.0], dtype=torch.float64)  # group 0: no spread, but a float residue of the mean
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    residue = group_advantages(rewards, groups)
    assert 0 < residue[:3].abs().max() < 1e-6  # what the records showed before: |A| ~ 1e-10 on a dead group
    exact = group_advantages(rewards, groups, zero_spread=1e-6)
    assert exact[:3].tolist() == [0.0, 0.0, 0.0]
    assert torch.equal(exact[3:], residue[3:])
    assert group_advantages(rewards, groups, scale_by_std=False, zero_spread=1e-6)[:3].tolist() == [0.0] * 3



def test_the_recipe_mode_reaches_the_update(tmp_path):
    """One step of the embedded default under paper and under token-mean: the same rows, different parameters."""
    import pyarrow.parquet as pq
    from safetensors.torch import load_file

    from evo.train.run import train_recipe

    from .conftest import small_recipe

    runs = {}
    for mode in ("paper", "token-mean"):
        out = tmp_path / mode
        train_recipe(small_recipe(**{"seed": 0, "grpo.steps": 1, "grpo.loss_aggregation": mode}), out, progress=False)
        runs[mode] = (load_file(str(out / "checkpoint" / "model.safetensors")), pq.read_table(out / "rollouts.parquet"))
    (wp, rp), (wt, rt) = runs["paper"], runs["token-mean"]
    assert rp.equals(rt)  # same samples, advantages and decisions: only the weights of the loss differ
    assert max(float((wp[k] - wt[k]).abs().max()) for k in wp) > 1e-4


def test_clip_fractions_are_logged_as_token_means_like_the_peers(tmp_path):
    import pyarrow.parquet as pq

    from evo.train.records import read_metrics
    from evo.train.run import train_recipe

    from .conftest import small_recipe

    out = tmp_path / "run"
    recipe = small_recipe(**{"seed": 0, "grpo.steps": 1, "grpo.num_iterations": 3, "grpo.learning_rate": 0.05,
                             "rollout.max_new_tokens": 8})
    train_recipe(recipe, out, progress=False)
    (m,) = read_metrics(out / "metrics.jsonl")
    live = [r for r in pq.read_table(out / "rollouts.parquet").to_pylist() if r["kept"] and r["num_tokens"] > 0]
    tokens = sum(r["num_tokens"] for r in live)
    for side in ("low", "high"):
        token_mean = sum(r[f"clip_frac_{side}"] * r["num_tokens"] for r in live) / tokens
        assert m[f"policy/clip_frac_{side}"] == pytest.approx(token_mean)
        assert m[f"policy/clip_frac_{side}_traj_mean"] == pytest.approx(sum(r[f"clip_frac_{side}"] for r in live) / len(live))
    assert m["policy/clip_frac_low"] + m["policy/clip_frac_high"] > 0  # the updates were large enough to clip
