"""Response log-probabilities with the prompt computed once per group (prefix sharing).

The G trajectories of a group share their prompt. Instead of running the
model over G copies of prompt + response, `response_logits` runs each distinct
prompt once (with gradient), copies its key/value cache to the rows that
continue it (an index_select, so gradients from every row flow back into the
one prompt computation) and runs only the response tokens on top. The math is
the same as a forward over the full sequences; the prompt costs 1/G of what it
would. Works for any Hugging Face causal LM that takes `past_key_values` and
`position_ids`.

Two more savings, both exact: identical trajectories of a group (frequent once
the policy is confident) are computed once and share their logits, so their
gradients add up as if each had been computed; and responses, right-padded
and of very different lengths (an answer that ends at its first token next to
one that runs to the limit), are split into a few length buckets
(`length_buckets`), each run on its own copy of the prompt cache, so the
padded work is what it costs, not the longest row times all.

Layout: prompts are left-padded (their last token sits at the last position,
whose logits predict the first response token), responses right-padded.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import torch

from evo.errors import TrainError


@dataclass
class TrainBatch:
    """A step's trajectories as the engine consumes them."""

    prompts: list[list[int]]  # K distinct prompts
    row_prompt: list[int]  # (N,) index into `prompts`
    responses: list[list[int]]  # (N,) response ids: actions and observations
    response_masks: list[list[int]]  # (N,) 1 = policy-produced (trained), 0 = observation
    advantages: torch.Tensor  # (N,)
    weights: torch.Tensor  # (N,) trajectory weights from objective.trajectory_weights
    pad_id: int = 0
    segments: list[int] = field(default_factory=list)  # (N,) `micro_batches` segment of each row (empty: all 0)

    @property
    def size(self) -> int:
        return len(self.responses)


def build_batch(trajs: Sequence, advantages: Sequence[float], weights: Sequence[float], pad_id: int) -> TrainBatch:
    """Group trajectories by identical prompt ids; keep their order."""
    index: dict[tuple, int] = {}
    prompts, row_prompt = [], []
    for t in trajs:
        key = tuple(t.prompt_ids)
        if not key:
            raise TrainError(f"task {t.task_id!r}: its prompt encodes to no tokens; a policy needs a non-empty prompt")
        if key not in index:
            index[key] = len(prompts)
            prompts.append(list(key))
        row_prompt.append(index[key])
    return TrainBatch(prompts, row_prompt, [list(t.response_ids) for t in trajs],
                      [list(t.response_mask) for t in trajs],
                      torch.tensor(list(advantages), dtype=torch.float32),
                      torch.tensor(list(weights), dtype=torch.float64), pad_id,
                      [int(t.info.get("segment", 0)) for t in trajs])


def micro_batches(segments: Sequence[int], size: int) -> list[list[int]]:
    """Positions 0..len(segments)-1 cut into micro-batches of at most `size`, segment by segment.

    `segments[i]` is the segment of the i-th row computed (`evo.train.step_batch`
    gives each group the rank that samples it in a two-rank run).
    Segments are taken in increasing order, each row keeping its place within
    its own, and a micro-batch never spans two. Why: a micro-batch's gradient
    depends on its rows to float rounding (the batch shape, the padding, the
    sum over its tokens), and AdamW's first steps divide by a gradient's size,
    so an element whose gradient nearly cancels turns that rounding into a
    visible share of the learning rate. With these micro-batches one process
    computes exactly the ones each rank of a two-rank run computes, and
    `--nproc 2` reproduces the one-process update.
    """
    order = sorted(range(len(segments)), key=lambda i: segments[i])  # stable: a segment keeps its row order
    chunks: list[list[int]] = []
    for i in order:
        if not chunks or len(chunks[-1]) >= size or segments[chunks[-1][0]] != segments[i]:
            chunks.append([])
        chunks[-1].append(i)
    return chunks


@lru_cache(maxsize=None)
def _cache_kwarg_of(cls) -> str:
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def _cache_kwarg(model) -> str:
    """`cache` (transformers >= 5.2x) or `past_key_values` (earlier releases)."""
    return _cache_kwarg_of(type(model))


def response_logits(model, batch: TrainBatch, rows: Sequence[int], temperature: float = 1.0):
    """Logits predicting each response token of `rows`, with targets and loss mask.

    Returns logits (n, R, V) already divided by `temperature`, targets (n, R)
    and mask (n, R) (1 on policy-produced tokens, 0 on observations and padding).
    """
    device = next(model.parameters()).device
    local: dict[int, int] = {}
    for r in rows:
        local.setdefault(batch.row_prompt[r], len(local))
    prompts = [batch.prompts[p] for p in local]
    width = max(len(p) for p in prompts)
    k, n = len(prompts), len(rows)
    p_ids = torch.full((k, width), batch.pad_id, dtype=torch.long)  # (k, P) left-padded
    p_mask = torch.zeros((k, width), dtype=torch.long)  # (k, P)
    for i, p in enumerate(prompts):
        p_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        p_mask[i, width - len(p):] = 1
    p_pos = (p_mask.cumsum(-1) - 1).clamp(min=0)  # (k, P) positions start at 0 on the first real token
    out = model(input_ids=p_ids.to(device), attention_mask=p_mask.to(device), position_ids=p_pos.to(device),
                use_cache=True, logits_to_keep=1)
    # Identical trajectories (same prompt, same response: common once a policy is confident) have
    # identical logits: each is computed once and its logits are shared, so their gradients add up.
    distinct: dict[tuple, int] = {}
    row_of, uniq = [], []  # (n,) row -> distinct trajectory; (u,) distinct -> its first row
    for i, r in enumerate(rows):
        key = (batch.row_prompt[r], tuple(batch.responses[r]))
        if key not in distinct:
            distinct[key] = len(uniq)
            uniq.append(i)
        row_of.append(distinct[key])
    u = len(uniq)
    sel = torch.tensor([local[batch.row_prompt[rows[i]]] for i in uniq])  # (u,) prompt of each distinct row
    sel_d = sel.to(device)
    first = out.logits[:, -1].index_select(0, sel_d)  # (u, V) predicts response token 0
    cache = out["cache"] if "cache" in out else out["past_key_values"]

    lengths = [len(batch.responses[r]) for r in rows]
    width_r = max(max(lengths, default=0), 1)
    r_ids = torch.full((n, width_r), batch.pad_id, dtype=torch.long)  # (n, R) right-padded
    r_real = torch.zeros((n, width_r), dtype=torch.long)  # (n, R)
    mask = torch.zeros((n, width_r), dtype=torch.bool)  # (n, R)
    for i, r in enumerate(rows):
        resp, m = batch.responses[r], batch.response_masks[r]
        if resp:
            r_ids[i, : len(resp)] = torch.tensor(resp, dtype=torch.long)
            r_real[i, : len(resp)] = 1
            mask[i, : len(m)] = torch.tensor(m, dtype=torch.bool)
    uniq_t = torch.tensor(uniq)  # (u,)
    u_ids, u_real = r_ids.index_select(0, uniq_t), r_real.index_select(0, uniq_t)  # (u, R)
    u_lengths = [lengths[i] for i in uniq]
    start = p_mask.sum(-1).index_select(0, sel)  # (u,) prompt lengths = position of response token 0
    buckets = length_buckets(u_lengths) if _selectable(cache) else [list(range(u))]
    parts, order = [], []
    for bucket in buckets:
        fed = max(u_lengths[i] for i in bucket) - 1  # response tokens 0..fed-1 predict tokens 1..fed
        idx = torch.tensor(bucket)  # (m,)
        if fed <= 0:  # only the first token: the prompt's last logits predict it
            logits = first.index_select(0, idx.to(device))[:, None]  # (m, 1, V)
        else:
            if len(buckets) == 1:
                cache.reorder_cache(sel_d)  # (u, heads, P, d) per layer; differentiable index_select
                rows_cache = cache
            else:
                rows_cache = _rows_of(cache, sel_d.index_select(0, idx.to(device)))
            b_prompt_mask = p_mask.index_select(0, sel.index_select(0, idx))  # (m, P)
            full_mask = torch.cat([b_prompt_mask, u_real[idx, :fed]], dim=1)  # (m, P + fed)
            r_pos = start.index_select(0, idx)[:, None] + torch.arange(fed)[None, :]  # (m, fed)
            out2 = model(input_ids=u_ids[idx, :fed].to(device), attention_mask=full_mask.to(device),
                         position_ids=r_pos.to(device), use_cache=True, **{_cache_kwarg(model): rows_cache})
            logits = torch.cat([first.index_select(0, idx.to(device))[:, None], out2.logits], dim=1)  # (m, fed+1, V)
        parts.append(torch.nn.functional.pad(logits, (0, 0, 0, width_r - logits.shape[1])))  # (m, R, V)
        order += bucket
    logits = torch.cat(parts, dim=0) if len(parts) > 1 else parts[0]  # (u, R, V) in bucket order
    position = [0] * u
    for at, d in enumerate(order):
        position[d] = at
    gather = [position[d] for d in row_of]  # (n,) where each row's logits sit
    if gather != list(range(n)):
        logits = logits.index_select(0, torch.tensor(gather, device=device))  # (n, R, V) in row order
    return logits.float() / temperature, r_ids.to(device), mask.to(device)


# Cost of one extra forward + backward, in units of (row x response token) of padded work: on CPU with
# the tiny model a forward + backward has the fixed cost of ~80-100 positions. The split uses it, and the
# ranks' balancing (`evo.train.balance`) to price an update.
BUCKET_OVERHEAD = 96.0


def length_buckets(lengths: Sequence[int], overhead: float | None = None) -> list[list[int]]:
    """Split rows (positions in `lengths`) into buckets of similar length, longest first.

    Responses are right-padded to the longest one in their forward, so one
    bucket for a spread of lengths wastes up to half of the work. The split
    minimises padded positions + `overhead` per extra forward (exact dynamic
    programme over the distinct lengths, contiguous in sorted order); rows of
    length <= 1 need no response forward at all and cost nothing.
    """
    return _split(lengths, overhead)[1]


def padded_cost(lengths: Sequence[int], overhead: float | None = None) -> float:
    """What `length_buckets`' split of `lengths` costs: padded positions fed + `overhead` per forward."""
    return _split(lengths, overhead)[0]


def _split(lengths: Sequence[int], overhead: float | None) -> tuple[float, list[list[int]]]:
    overhead = BUCKET_OVERHEAD if overhead is None else overhead
    distinct = sorted(set(lengths), reverse=True)
    count = {d: 0 for d in distinct}
    for x in lengths:
        count[x] += 1
    # best[j]: minimal cost of the lengths distinct[j:]; a bucket distinct[j:k] feeds distinct[j] - 1 tokens per row.
    D = len(distinct)
    best, cut = [0.0] * (D + 1), [D] * D
    for j in range(D - 1, -1, -1):
        fed, rows_in, best[j] = max(distinct[j] - 1, 0), 0, float("inf")
        for k in range(j + 1, D + 1):
            rows_in += count[distinct[k - 1]]
            cost = (overhead if fed > 0 else 0.0) + rows_in * fed + best[k]
            if cost < best[j]:
                best[j], cut[j] = cost, k
    buckets, j = [], 0
    while j < D:
        members = set(distinct[j: cut[j]])
        buckets.append([i for i, x in enumerate(lengths) if x in members])
        j = cut[j]
    return best[0], buckets


def _selectable(cache) -> bool:
    """Plain per-layer key/value caches can be copied row-wise for several buckets."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _rows_of(cache, idx: torch.Tensor):
    """A new cache holding rows `idx` of `cache` (differentiable index_select); `cache` is left as it was."""
    view = copy.copy(cache)
    view.layers = [copy.copy(layer) for layer in cache.layers]
    view.reorder_cache(idx)  # rebinds each layer's keys/values; the shared originals are untouched
    return view
