"""Response log-probabilities with the prompt computed once per group (prefix sharing).

The G trajectories of a group share their prompt. Instead of running the
model over G copies of prompt + response, `response_logits` runs each distinct
prompt once (with gradient), copies its key/value cache to the rows that
continue it (an index_select, so gradients from every row flow back into the
one prompt computation) and runs only the response tokens on top. The math is
the same as a forward over the full sequences; the prompt costs 1/G of what it
would. Works for any Hugging Face causal LM that takes `past_key_values` and
`position_ids`.

Layout: prompts are left-padded (their last token sits at the last position,
whose logits predict the first response token), responses right-padded.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
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
                      torch.tensor(list(weights), dtype=torch.float64), pad_id)


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
    sel = torch.tensor([local[batch.row_prompt[r]] for r in rows], device=device)  # (n,)
    first = out.logits[:, -1].index_select(0, sel)  # (n, V) predicts response token 0
    cache = out["cache"] if "cache" in out else out["past_key_values"]
    cache.reorder_cache(sel)  # (n, heads, P, d) per layer; differentiable index_select

    length = max((len(batch.responses[r]) for r in rows), default=0)
    r_ids = torch.full((n, max(length, 1)), batch.pad_id, dtype=torch.long)  # (n, R) right-padded
    r_real = torch.zeros((n, max(length, 1)), dtype=torch.long)  # (n, R)
    mask = torch.zeros((n, max(length, 1)), dtype=torch.bool)  # (n, R)
    for i, r in enumerate(rows):
        resp, m = batch.responses[r], batch.response_masks[r]
        if resp:
            r_ids[i, : len(resp)] = torch.tensor(resp, dtype=torch.long)
            r_real[i, : len(resp)] = 1
            mask[i, : len(m)] = torch.tensor(m, dtype=torch.bool)
    if length <= 1:  # only the first token: the prompt's last logits predict it
        logits = first[:, None]  # (n, 1, V)
    else:
        full_mask = torch.cat([p_mask.index_select(0, sel.cpu()), r_real], dim=1)  # (n, P + R)
        start = p_mask.sum(-1).index_select(0, sel.cpu())[:, None]  # (n, 1) prompt lengths
        r_pos = start + torch.arange(length)[None, :]  # (n, R)
        # Feed response tokens 0..R-2: their outputs predict tokens 1..R-1.
        out2 = model(input_ids=r_ids[:, :-1].to(device), attention_mask=full_mask[:, :-1].to(device),
                     position_ids=r_pos[:, :-1].to(device), use_cache=True, **{_cache_kwarg(model): cache})
        logits = torch.cat([first[:, None], out2.logits], dim=1)  # (n, R, V)
    return logits.float() / temperature, r_ids.to(device), mask.to(device)
