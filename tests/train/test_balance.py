"""Balancing the update's work over ranks: what an update costs, and which groups move (one process; the two-rank
runs in test_distributed.py move groups for real and still train the one-rank step)."""

import random

from evo.train.balance import Row, computed_rows, plan_moves, rebalance, update_cost
from evo.train.distributed import SINGLE
from evo.train.forward import BUCKET_OVERHEAD
from evo.train.types import Trajectory


def _traj(group: int, sample: int, response: list[int], prompt=(1, 2, 3)) -> Trajectory:
    return Trajectory(task_id=f"t{group}", stratum="", group=group, sample=sample, prompt="p",
                      prompt_ids=list(prompt), response_ids=response, response_mask=[1] * len(response),
                      text="", finish_reason="eos", truncated=False)


def _group(g: int, n: int, length: int, prompt_len: int = 8) -> list[Row]:
    """n distinct rows of one group, all of one length."""
    return [Row(g, g, prompt_len, 1000 * g + i, length) for i in range(n)]


def test_only_computed_rows_are_priced_and_identical_ones_once():
    trajs = [_traj(0, 0, [5, 6]), _traj(0, 1, [5, 6]), _traj(0, 2, [7, 8, 9, 4]), _traj(1, 0, [5])]
    rows = computed_rows(trajs, [True, True, True, False])  # group 1 is dead: nothing of it is computed
    assert [r.group for r in rows] == [0, 0, 0] and rows[0].response == rows[1].response != rows[2].response
    alone = update_cost(rows[:1] + rows[2:], micro_batch=64)
    assert update_cost(rows, micro_batch=64) == alone  # the duplicate costs nothing more
    assert update_cost([], micro_batch=64) == 0


def test_rows_past_a_micro_batch_boundary_cost_a_whole_forward():
    rows = _group(0, 8, 10) * 1
    one_chunk = update_cost(rows, micro_batch=8)
    two_chunks = update_cost(rows + _group(1, 1, 10), micro_batch=8)
    assert two_chunks - one_chunk > BUCKET_OVERHEAD  # the ninth row: an extra prefill and forward


def _costs(rows, moves, mb):
    held = [list(r) for r in rows]
    for g, (src, dst) in moves.items():
        held[dst] += [r for r in held[src] if r.group == g]
        held[src] = [r for r in held[src] if r.group != g]
    return [update_cost(h, mb) for h in held]


def test_moves_even_out_the_update_and_every_rank_plans_the_same():
    rows = [_group(0, 8, 12) + _group(2, 8, 11) + _group(4, 8, 12) + _group(6, 8, 10), _group(1, 8, 3)]
    plan = plan_moves(rows, micro_batch=64)
    moves = plan.moves
    assert moves and sum(src == 0 for src, _ in moves.values()) > sum(src == 1 for src, _ in moves.values())
    before, after = [update_cost(r, 64) for r in rows], _costs(rows, moves, 64)
    assert max(after) < max(before) and max(after) - min(after) < max(before) - min(before)
    assert plan_moves([list(r) for r in rows], micro_batch=64) == plan
    assert plan.after == after and 0 < plan.gain == 1 - max(after) / max(before)


def test_a_move_that_would_push_the_receiver_past_a_micro_batch_boundary_is_not_made():
    # Equal tokens would want half a group moved; moving the whole one only swaps the wait, and with
    # micro-batches of 8 the receiver would need a second forward.
    rows = [_group(0, 8, 10) + _group(2, 4, 10), _group(1, 8, 10)]
    assert plan_moves(rows, micro_batch=8).moves == {}


def test_a_swap_evens_out_ranks_whose_row_counts_sit_on_a_micro_batch_boundary():
    # Rank 0 holds both long groups; moving one to rank 1 would give it a second micro-batch of 8 rows.
    rows = [_group(0, 8, 10) + _group(2, 8, 10) + _group(4, 8, 3) + _group(6, 8, 3),
            _group(1, 8, 3) + _group(3, 8, 3) + _group(5, 8, 3) + _group(7, 8, 3)]
    plan = plan_moves(rows, micro_batch=32)
    directions = set(plan.moves.values())
    assert directions == {(0, 1), (1, 0)} and len(plan.moves) % 2 == 0  # only swaps: counts stay 32 and 32
    assert max(plan.after) < max(plan.before) and plan.gain > 0.1


def test_nothing_moves_when_no_group_would_lower_the_larger_cost():
    assert plan_moves([_group(0, 8, 10), _group(1, 8, 10)], micro_batch=64).moves == {}
    assert plan_moves([_group(0, 8, 20), []], micro_batch=64).moves == {}  # the one group would only swap ranks
    assert plan_moves([[], []], micro_batch=64).moves == {}  # dead groups are not priced: never worth sending
    assert plan_moves([_group(0, 8, 20)], micro_batch=64).moves == {}  # one rank


def test_random_updates_over_three_ranks_never_get_slower_and_each_group_moves_once():
    rng = random.Random(0)
    for _ in range(100):
        mb = rng.choice([4, 8, 64])
        rows = [sum((_group(3 * i + r, rng.randint(1, 8), rng.randint(1, 30)) for i in range(rng.randint(0, 6))), [])
                for r in range(3)]
        moves = plan_moves(rows, micro_batch=mb).moves
        before, after = [update_cost(r, mb) for r in rows], _costs(rows, moves, mb)
        assert max(after) <= max(before)
        for g, (src, dst) in moves.items():
            assert any(r.group == g for r in rows[src]) and src != dst


def test_one_process_keeps_its_batch_as_it_is():
    batch = object()
    assert rebalance(batch, [], SINGLE, micro_batch=64) == (batch, None)
