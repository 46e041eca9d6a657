"""A lean KV-cached sampling loop for Hugging Face causal LMs (the HF backend's default sampler).

Why not `model.generate`: at the model sizes we train on CPU, `generate`'s
per-step machinery (logits processors, stopping criteria, cache and mask
bookkeeping, rows that finished long ago still computed) costs as much as the
model itself. This loop does only what a GRPO rollout needs:

1. one prefill forward over the *distinct* left-padded contexts (the G samples
   of a group share their prompt, so it is computed once);
2. single-token forwards with the KV cache, one row per distinct context:
   rows of a group that drew the same tokens so far share one cache row (they
   would compute exactly the same thing), and the cache is re-indexed as rows
   diverge or finish. Each row samples from softmax(logits / temperature)
   (optionally nucleus-truncated exactly like `transformers`'
   TopPLogitsWarper, no top-k) with a seeded `torch.Generator`, or, when
   the caller names each row's *stream* (a trajectory: its group and sample),
   by inverse-CDF sampling with a uniform that is a hash of (the stream's
   seed, the token position): what a row draws then depends only on its
   stream, the seed and its own logits, never on which other rows share the
   batch, so a data-parallel rank samples the same trajectories for its groups
   as one process sampling every group (`stream_seed`, `stream_uniforms`);
   `temperature <= 0` takes the argmax (greedy);
3. a row ends at an end token (EOS → "eos", a single-token stop string →
   "stop"), when its decoded text first contains a multi-token stop string
   ("stop"; decoded only for rows whose new token can complete one), or at
   `max_new_tokens` ("length"). Finished rows leave the batch, and the loop
   stops when none is left.

The returned ids include the end token; text is `decode(ids)` (special tokens
skipped), cut just after a multi-token stop string. `entropy` is the mean
entropy of the distribution each token was drawn from (for greedy: of the
temperature-1 softmax, as the `generate` path records it).

Models whose cache is not a plain per-layer key/value cache (sliding-window,
linear-attention or quantized layers) raise `LeanSamplingUnsupported` after the
prefill, and the caller falls back to `generate`.
"""

from __future__ import annotations

import hashlib
import inspect
from functools import lru_cache
from typing import Callable, Hashable, Sequence

import torch

from evo.train.types import Generation


class LeanSamplingUnsupported(Exception):
    """This model or its cache cannot go through the lean loop; use `generate` instead."""


@lru_cache(maxsize=None)
def _forward_params(cls) -> frozenset:
    return frozenset(inspect.signature(cls.forward).parameters)


def lean_sampling_supported(model) -> bool:
    """A decoder-only HF model whose forward takes position ids and a KV cache."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    params = _forward_params(type(model))
    return "position_ids" in params and ("cache" in params or "past_key_values" in params)


def _check_cache(cache) -> None:
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        kinds = sorted({type(layer).__name__ for layer in layers or ()}) or [type(cache).__name__]
        raise LeanSamplingUnsupported(f"cache layers {', '.join(kinds)} are not plain key/value layers")


def stop_safe_tokens(tokenizer, stop_strings: Sequence[str]) -> frozenset[int]:
    """Token ids after which a row's text cannot newly contain any of `stop_strings`.

    A stop string that newly appears must end inside the text the last token
    added, so that token's text holds the string's last character. A token's
    text alone can differ from what it adds in context only by whitespace
    (SentencePiece's leading space, clean-up of spaces) or by incomplete UTF-8
    bytes ("\\ufffd"), and tokens that decode to nothing (special tokens) are not
    trusted either. A stop string that ends in whitespace leaves no token safe.
    Only the rows whose new token is not safe are decoded and searched.
    """
    last = {s[-1] for s in stop_strings if s}
    if not last or any(c.isspace() for c in last):
        return frozenset()
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))], skip_special_tokens=True)
    return frozenset(i for i, t in enumerate(texts) if t and "\ufffd" not in t and not any(c in t for c in last))


def _model_cache_kwarg(model) -> str:
    return "cache" if "cache" in _forward_params(type(model)) else "past_key_values"


class _HFStepper:
    """The model's own forward with its KV cache, behind the interface of `evo.train.decoder.CachedDecoder`."""

    def __init__(self, model):
        self.model, self.cache_kw = model, _model_cache_kwarg(model)
        self.cache, self.mask = None, None

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        self.cache = out[self.cache_kw] if self.cache_kw in out else out["past_key_values"]
        _check_cache(self.cache)
        self.mask = mask  # (k, P) grows by one column per token
        return out.logits[:, -1]

    def reorder(self, index: torch.Tensor) -> None:
        self.cache.reorder_cache(index)
        self.mask = self.mask.index_select(0, index)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(tokens), 1))], dim=1)  # (k, P + steps)
        out = self.model(input_ids=tokens[:, None], attention_mask=self.mask, position_ids=positions[:, None],
                         use_cache=True, **{self.cache_kw: self.cache})
        return out.logits[:, -1]


def _stepper(model, positions: int, contexts: Sequence[Sequence[int]]):
    """The direct decoder where it computes exactly the model's forward, else the model's own forward.

    An empty context (no real token to attend to) keeps the model's own forward:
    what a row with nothing visible computes is the model's convention, not ours.
    """
    from evo.train.decoder import CachedDecoder, supports

    if supports(model) and all(contexts):
        return CachedDecoder(model, positions)
    return _HFStepper(model)


_MASK64 = (1 << 64) - 1


def stream_seed(seed: int, stream: Hashable) -> int:
    """The seed of one stream of a seeded call: a hash, so nearby seeds and streams never share draws (63 bits)."""
    digest = hashlib.blake2b(f"{int(seed)}:{stream!r}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def stream_uniforms(bases: Sequence[int], position: int) -> torch.Tensor:
    """One uniform in [0, 1) per row: splitmix64 of (its stream seed, the token position). (n,) float64"""
    out = []
    for base in bases:
        z = (base + (position + 1) * 0x9E3779B97F4A7C15) & _MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        out.append(((z ^ (z >> 31)) >> 11) * 2.0 ** -53)
    return torch.tensor(out, dtype=torch.float64)


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Token of each row whose cumulative-probability interval holds its uniform. probs (n, V) -> (n,)"""
    cdf = probs.double().cumsum(-1)  # (n, V)
    u = uniforms.to(cdf.device)[:, None] * cdf[:, -1:]  # (n, 1) scaled to the row's total mass: never past the end
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=probs.shape[1] - 1)  # (n,)


def draw_tokens(logits: torch.Tensor, node_of_row: torch.Tensor, temperature: float, top_p: float,
          generator, uniforms: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row from its node's logits; returns tokens (n,) and each row's entropy (n,).

    With `uniforms` (n,) each row draws by `inverse_cdf` instead of from `generator`.
    """
    logits = logits.float()  # (k, V) one row per distinct context
    if temperature <= 0:
        entropy = _entropy(torch.log_softmax(logits, dim=-1))  # (k,)
        return logits.argmax(-1).index_select(0, node_of_row), entropy.index_select(0, node_of_row)
    scores = logits / temperature  # (k, V)
    if top_p < 1.0:
        # transformers' TopPLogitsWarper: drop the low tail whose mass is <= 1 - top_p, keep >= 1 token.
        sorted_scores, order = torch.sort(scores, descending=False)  # (k, V)
        cumulative = sorted_scores.softmax(-1).cumsum(-1)  # (k, V)
        drop_sorted = cumulative <= 1 - top_p
        drop_sorted[:, -1] = False
        drop = drop_sorted.scatter(1, order, drop_sorted)  # (k, V)
        scores = scores.masked_fill(drop, float("-inf"))
    logp = torch.log_softmax(scores, dim=-1)  # (k, V)
    probs = logp.exp().index_select(0, node_of_row)  # (n, V)
    if uniforms is not None:
        tokens = inverse_cdf(probs, uniforms)  # (n,)
    else:
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (n,)
    return tokens, _entropy(logp).index_select(0, node_of_row)


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    p = logp.exp()  # (n, V)
    return -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1)  # (n,)


def sample(model, prompt_ids: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float, top_p: float,
           eos_id: int, end_ids: Sequence[int], pad_id: int, decode: Callable[[list[int]], str],
           stop_strings: Sequence[str] = (), stop_safe: frozenset[int] = frozenset(),
           seed: int | None = None, streams: Sequence[Hashable] | None = None) -> list[Generation]:
    """Sample one completion per context (token ids) with the lean loop; see the module docstring.

    `end_ids` are the token ids that end a row (EOS first); `stop_safe` is
    `stop_safe_tokens(tokenizer, stop_strings)` (empty: check after every token).
    `streams` (one per row, with a `seed`) draws each row from its own stream.
    Raises `LeanSamplingUnsupported` when the model's cache cannot be used.
    """
    n_rows = len(prompt_ids)
    if n_rows == 0:
        return []
    device = next(model.parameters()).device
    generator = None
    bases = [stream_seed(seed, key) for key in streams] if streams is not None and seed is not None else None
    if seed is not None and bases is None:
        generator = torch.Generator(device=device)
        generator.manual_seed(int(seed))

    # Distinct contexts, in first-seen order; row r continues context source[r].
    index: dict[tuple, int] = {}
    source = [index.setdefault(tuple(p), len(index)) for p in prompt_ids]
    contexts = list(index)
    width = max(1, max(len(c) for c in contexts))
    ctx_ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)  # (K, P) left-padded
    ctx_mask = torch.zeros((len(contexts), width), dtype=torch.long)  # (K, P)
    for i, c in enumerate(contexts):
        if c:
            ctx_ids[i, width - len(c):] = torch.tensor(c, dtype=torch.long)
            ctx_mask[i, width - len(c):] = 1
    ctx_pos = (ctx_mask.cumsum(-1) - 1).clamp(min=0)  # (K, P) positions from 0 at the first real token

    end_set = set(int(e) for e in end_ids)
    stop_strings = [s for s in stop_strings if s]
    rows: list[list[int]] = [[] for _ in range(n_rows)]
    entropy_sum = [0.0] * n_rows
    texts: list[str | None] = [None] * n_rows
    reasons: list[str | None] = [None] * n_rows

    stepper = _stepper(model, width + max_new_tokens, contexts)
    logits = stepper.prefill(ctx_ids.to(device), ctx_mask.to(device), ctx_pos.to(device))  # (k, V) one per node
    position = ctx_mask.sum(-1).to(device)  # (k,) position of the next token
    live = list(range(n_rows))  # rows still sampling
    node = list(source)  # row -> its context's batch entry (node)

    for step in range(max_new_tokens):
        uniforms = None if bases is None else stream_uniforms([bases[r] for r in live], step)  # (n,)
        tokens, entropy = draw_tokens(logits, torch.tensor([node[r] for r in live], device=device),
                                temperature, top_p, generator, uniforms)  # (n,), (n,)
        last = step == max_new_tokens - 1
        children: dict[tuple[int, int], int] = {}  # (node, token) -> next node
        parents, fed, still = [], [], []
        for row, tok, ent in zip(live, tokens.tolist(), entropy.tolist()):
            ids = rows[row]
            ids.append(tok)
            entropy_sum[row] += ent
            if tok in end_set:
                reasons[row] = "eos" if tok == eos_id else "stop"
            elif stop_strings and tok not in stop_safe:
                text = decode(ids)
                for s in stop_strings:
                    if s in text:
                        reasons[row], texts[row] = "stop", text[: text.index(s) + len(s)]
                        break
            if reasons[row] is None and last:
                reasons[row] = "length"
            if reasons[row] is None:
                key = (node[row], tok)
                if key not in children:  # rows that drew the same token still share one context
                    children[key] = len(parents)
                    parents.append(node[row])
                    fed.append(tok)
                node[row] = children[key]
                still.append(row)
        live = still
        if not live:
            break
        if parents != list(range(len(logits))):  # contexts split, merged or finished
            index_t = torch.tensor(parents, device=device)  # (k',)
            stepper.reorder(index_t)
            position = position.index_select(0, index_t)
        logits = stepper.step(torch.tensor(fed, device=device), position)  # (k', V)
        position = position + 1

    gens = []
    for row in range(n_rows):
        ids = rows[row]
        text = texts[row] if texts[row] is not None else decode(ids)
        gens.append(Generation(text, ids, reasons[row] or "length",
                               entropy=entropy_sum[row] / len(ids) if ids else None))
    return gens
