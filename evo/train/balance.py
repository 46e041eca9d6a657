"""Even out the ranks' training work after sampling: whole groups move from the busiest rank to the idlest.

Why: ranks sample equal numbers of groups, but not equal work. A group whose
rewards do not differ has no gradient and is never computed; identical
trajectories are computed once; completions differ in length; and the rows a
rank computes fall into micro-batches, each with a fixed cost, so a few rows
past a micro-batch boundary cost a whole extra forward and backward. One rank
then reaches the update's synced backward first and waits for the other
(`time/rank_wait_s`). This is verl's `balance_batch` for ranks that each hold
their own samples (verl's driver holds all of them), priced by the engine's
own way of computing an update rather than by token counts alone: a first
version here that evened out tokens moved groups across micro-batch
boundaries and made the wait longer.

How: once a step's advantages and weights are known, every rank states the
rows it will compute (`computed_rows`); every rank computes the same plan
from all of them (`plan_moves`, pricing each rank's update with
`update_cost`); only the moved groups' rows travel (`Ranks.exchange`). The
update is the same whichever rank trains a row: the gradient is a sum over
trajectories whose weights are already normalised over every rank. Rows keep
the `rank` that sampled them (`Trajectory.info["rank"]`), so a group's record
still names one sampling rank; `dist/moved_groups` counts what moved,
`dist/balance_gain` is `Plan.gain` and `time/balance_s` what it all took.

Off by default (`grpo.balance_ranks: false`). On these 2-vCPU machines the
wait is mostly not imbalance: in one 2-rank run of the bench recipe, ranks
whose updates were priced within 2% of each other took 0.21 and 0.38 s, the
slower rank alternating from step to step. There the planning and transfer
(6-18 ms a step) bought no measurable speed (docs/training.md). It is meant
for updates whose cost varies between ranks far more than that: long-tailed
completion lengths on GPUs, where a plan costs the same few milliseconds.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from evo.train.forward import BUCKET_OVERHEAD, padded_cost

# A move or swap must lower the busier rank's cost by this share: smaller gains are well inside the error
# of `update_cost` as a predictor of time (on one CPU thread, 20% residual spread around its linear fit).
MIN_GAIN = 0.01
CANDIDATES = 4  # moves and swaps priced exactly per round of `plan_moves`


class Row(NamedTuple):
    """What pricing needs of one row the engine computes."""

    group: int
    prompt: int  # identity of its prompt ids (rows sharing a prompt prefill it once per micro-batch)
    prompt_len: int
    response: int  # identity of (prompt ids, response ids): identical rows are computed once per micro-batch
    response_len: int


def computed_rows(trajs: list, computed: list[bool]) -> list[Row]:
    """This rank's rows that the engine computes, in the order it computes them."""
    return [Row(t.group, hash(tuple(t.prompt_ids)), len(t.prompt_ids),
                hash((tuple(t.prompt_ids), tuple(t.response_ids))), len(t.response_ids))
            for t, c in zip(trajs, computed) if c]


def update_cost(rows: list[Row], micro_batch: int) -> float:
    """The positions an update of `rows` feeds, as `evo.train.forward.response_logits` computes it.

    Per micro-batch: the distinct prompts left-padded to the widest, plus one
    forward's overhead; the distinct responses in length buckets
    (`padded_cost`). A backward costs about as much again, so the sum is
    proportional to the update's time on a rank.
    """
    total = 0.0
    for i in range(0, len(rows), micro_batch):
        chunk = rows[i: i + micro_batch]
        prompts = {r.prompt: r.prompt_len for r in chunk}
        responses = {r.response: r.response_len for r in chunk}
        total += BUCKET_OVERHEAD + len(prompts) * max(prompts.values()) + padded_cost(list(responses.values()))
    return total


class Plan(NamedTuple):
    moves: dict[int, tuple[int, int]]  # group id -> (from rank, to rank)
    before: list[float]  # each rank's `update_cost` as sampled
    after: list[float]  # and once the moves are made

    @property
    def gain(self) -> float:
        """The share by which the busiest rank's priced update got shorter."""
        return 1.0 - max(self.after) / max(self.before) if self.before and max(self.before) > 0 else 0.0


def plan_moves(rows: list[list[Row]], micro_batch: int) -> Plan:
    """Which groups move, the same plan on every rank (`rows`: each rank's).

    Greedy and deterministic: between the busiest rank and the idlest, make
    the one move, or swap of a group each way, that lowers the larger of their
    two costs most (a swap keeps both ranks' row counts, so it evens out costs
    where any move would push one rank past a micro-batch boundary); moved
    groups join the end of the receiver's rows, as they will there. Stop when
    nothing lowers it by `MIN_GAIN`. A group moves at most once, so the loop ends.
    """
    held = [list(r) for r in rows]
    cost = [update_cost(r, micro_batch) for r in held]
    before = list(cost)
    by_group: dict[int, list[Row]] = {}
    for r in (r for rank_rows in held for r in rank_rows):
        by_group.setdefault(r.group, []).append(r)
    alone = {g: update_cost(rs, micro_batch) for g, rs in by_group.items()}
    moves: dict[int, tuple[int, int]] = {}
    while len(held) > 1:
        src = max(range(len(cost)), key=lambda r: (cost[r], -r))
        dst = min(range(len(cost)), key=lambda r: (cost[r], r))
        if src == dst:  # every rank costs the same
            break
        best = None  # (larger cost after, group src gives, group dst gives, src rows after, dst rows after)
        free = [{r.group for r in held[k]} - moves.keys() for k in (src, dst)]
        for g, h in _candidates(free[0], free[1], alone, (cost[src] - cost[dst]) / 2):
            after_src = [r for r in held[src] if r.group != g] + [r for r in held[dst] if r.group == h]
            after_dst = [r for r in held[dst] if r.group != h] + [r for r in held[src] if r.group == g]
            worst = max(update_cost(after_src, micro_batch), update_cost(after_dst, micro_batch))
            if worst < cost[src] * (1 - MIN_GAIN) and (best is None or worst < best[0]):
                best = (worst, g, h, after_src, after_dst)
        if best is None:
            break
        _, g, h, held[src], held[dst] = best
        cost[src], cost[dst] = update_cost(held[src], micro_batch), update_cost(held[dst], micro_batch)
        moves[g] = (src, dst)
        if h is not None:
            moves[h] = (dst, src)
    return Plan(moves, before, cost)


def _candidates(src: set, dst: set, alone: dict[int, float], transfer: float) -> list[tuple]:
    """The CANDIDATES moves (g, None) and swaps (g, h) worth pricing exactly: those whose groups' own costs
    (`alone`) shift closest to `transfer` (half the gap) from the busier rank (groups `src`) to the idler.

    Pricing every move and swap exactly took ~120 ms per plan for 16 groups a
    rank on the bench recipe; pricing these four takes ~2.6 ms and keeps most
    of its gain (six sampled steps: 1.2-7.9% off the busier rank's priced
    update, against 1.6-8.3% pricing everything).
    """
    options = [(abs(alone[g] - transfer), g, -1) for g in src]
    options += [(abs(alone[g] - alone[h] - transfer), g, h) for g in src for h in dst if alone[g] > alone[h]]
    return [(g, None if h < 0 else h) for _, g, h in sorted(options)[:CANDIDATES]]


def rebalance(batch, computed: list[bool], ranks, micro_batch: int):
    """`batch` (a `StepBatch`) with whole groups moved between ranks per `plan_moves`; and the plan (None in one
    process).

    One process: `batch` itself. Rows that stay keep their order; received
    groups follow in the order the plan moved them (a stable sort, so a group's
    rows keep theirs).
    """
    if ranks.world == 1:
        return batch, None
    plan = plan_moves(ranks.all_gather(computed_rows(batch.trajs, computed)), micro_batch)
    moves = plan.moves
    if not moves:
        return batch, plan
    rows = list(zip(batch.trajs, batch.rewards, batch.decisions, batch.advantages.tolist(), batch.weights.tolist()))
    outgoing: list[list] = [[] for _ in range(ranks.world)]
    staying = []
    for row in rows:
        move = moves.get(row[0].group)
        if move is None:
            staying.append(row)
        else:
            outgoing[move[1]].append(row)
    order = {g: i for i, g in enumerate(moves)}  # received groups join in the plan's order, as it priced them
    received = sorted((row for part in ranks.exchange(outgoing) for row in part), key=lambda row: order[row[0].group])
    mine = staying + received
    trajs, rewards, decisions, adv, weights = (list(x) for x in zip(*mine)) if mine else ([], [], [], [], [])
    batch.trajs, batch.rewards, batch.decisions = trajs, rewards, decisions
    batch.advantages = torch.tensor(adv, dtype=batch.advantages.dtype)  # (N',)
    batch.weights = torch.tensor(weights, dtype=batch.weights.dtype)  # (N',)
    return batch, plan
