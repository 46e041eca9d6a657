"""What makes a rank's shard of a step the one-process step: per-trajectory sampling streams, global weights."""

import torch

from evo.domains.arithmetic import ArithmeticEnv
from evo.train.objective import live_group_count, trajectory_weights
from evo.train.policy import load_policy
from evo.train.rollout import RolloutLimits, rollout


def test_a_shard_of_groups_samples_what_the_whole_step_samples():
    env = ArithmeticEnv(n_validation=12, n_train=60)
    tasks = env.tasks("train")[:6]
    policy = load_policy("builtin:tiny-char")
    limits = RolloutLimits(max_new_tokens=6, stop=tuple(env.stop))
    for seed in (0, 1):
        whole = rollout(env, tasks, policy, 4, limits, seed=seed)
        shards = [rollout(env, tasks[r::2], policy, 4, limits, seed=seed, group_ids=list(range(6))[r::2])
                  for r in (0, 1)]
        parts = sorted(shards[0] + shards[1], key=lambda t: (t.group, t.sample))
        assert [(t.group, t.sample, t.response_ids) for t in whole] == \
               [(t.group, t.sample, t.response_ids) for t in parts]
        assert len({tuple(t.response_ids) for t in whole}) > 4, "a degenerate policy proves nothing"


def test_weights_normalised_over_every_shard_sum_to_the_whole_batch_weights():
    groups = torch.tensor([0, 0, 1, 1, 1, 2, 2, 3])  # (N,)
    contributes = torch.tensor([True, False, True, True, False, False, False, True])  # group 2 is dead
    whole = trajectory_weights(groups, contributes)  # (N,)
    shard = [torch.tensor([0, 1, 5, 6]), torch.tensor([2, 3, 4, 7])]  # rows of groups {0, 2} and {1, 3}
    live = sum(live_group_count(groups[i], contributes[i]) for i in shard)
    assert live == 3
    parts = torch.zeros_like(whole)
    for i in shard:
        parts[i] = trajectory_weights(groups[i], contributes[i], live_groups=live)
    assert torch.equal(parts, whole) and float(whole.sum()) == 1.0
