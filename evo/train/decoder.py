"""A direct KV-cached decoder over a Llama-family Hugging Face model's weights (the lean sampler's fast path).

Why: at the sizes we train on CPU (the embedded tiny-char: 4 layers of width
128), a Hugging Face forward of one new token per row spends most of its time
outside arithmetic: mask building, cache bookkeeping, module calls, keyword
plumbing through every layer, output dataclasses. A GRPO rollout's tail (the
few rows still sampling after most have ended) is a run of such forwards over
a handful of rows, so that fixed cost is most of the sampling time, and it
does not shrink when a data-parallel rank samples half the rows.

This decoder computes the same function with few tensor operations: per
sampling call it fuses each layer's q/k/v and gate/up projection weights
(copies taken under no_grad, so they are the current weights) and tabulates
the model's own rotary embedding for every position the call can reach; per
token it runs embed → per layer RMSNorm → fused q/k/v (with biases or Qwen3's
per-head q/k norms where the model has them) → rotation → scaled-dot-product
attention over a preallocated key/value buffer → output projection → residual
→ RMSNorm → SiLU-gated MLP → residual, then the final norm and LM head on the
last position. Attention reads the whole buffer with the unwritten columns
masked: on CPU a contiguous buffer is faster to attend over than a slice of it.

It takes only models whose layers compute exactly that (`supports`): the
`llama`, `qwen2` and `qwen3` model types with full attention in every layer,
no tensor-parallel split, SiLU activation, a rotary table that does not
depend on the sequence seen (not "dynamic" or "longrope", which Hugging Face
recomputes from the current length), and no logit soft-capping. Anything else
keeps the Hugging Face forward. Its RMSNorm rounds as Hugging Face's does (in
float32, cast back), so with float32 weights its logits equal the Hugging Face
forward's to float32 rounding and with bfloat16 weights they agree to that
format's rounding of the same operations; `tests/train/test_decoder.py` checks
it against the Hugging Face forward on each supported model type and in
bfloat16.

Rows are left-padded contexts that share one column per step (the sampler's
layout): a pad column is masked as a key for every row and a pad query
attends to itself only, so no row reads a pad position and no NaN arises.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_MODEL_TYPES = ("llama", "qwen2", "qwen3")


def supports(model) -> bool:
    """Whether `CachedDecoder` computes exactly what `model`'s own forward does.

    Conservative: a model is declined on any configuration whose effect on the
    forward this decoder does not reproduce, even one (such as
    `pretraining_tp` > 1) that only changes how Hugging Face splits a matmul.
    """
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) not in _MODEL_TYPES:
        return False
    if getattr(config, "pretraining_tp", 1) != 1 or getattr(config, "hidden_act", "silu") != "silu":
        return False
    if getattr(config, "use_sliding_window", False) or getattr(config, "final_logit_softcapping", None):
        return False
    if any(kind != "full_attention" for kind in (getattr(config, "layer_types", None) or ())):
        return False
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) in ("dynamic", "longrope"):
        return False
    inner = getattr(model, "model", None)
    if not all(hasattr(inner, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")) \
            or not hasattr(model, "lm_head"):
        return False
    attn = inner.layers[0].self_attn
    return all(hasattr(attn, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling"))


class _Layer:
    """One decoder layer's weights, fused for the call."""

    def __init__(self, layer):
        attn, mlp = layer.self_attn, layer.mlp
        self.qkv_w = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        biases = [p.bias for p in (attn.q_proj, attn.k_proj, attn.v_proj)]
        self.qkv_b = torch.cat(biases) if all(b is not None for b in biases) else None
        self.q_size, self.kv_size = attn.q_proj.out_features, attn.k_proj.out_features
        self.o_w, self.o_b = attn.o_proj.weight, attn.o_proj.bias
        self.gate_up_w = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])
        gate_b, up_b = mlp.gate_proj.bias, mlp.up_proj.bias
        self.gate_up_b = torch.cat([gate_b, up_b]) if gate_b is not None and up_b is not None else None
        self.inter = mlp.gate_proj.out_features
        self.down_w, self.down_b = mlp.down_proj.weight, mlp.down_proj.bias
        self.norm1 = _norm(layer.input_layernorm)
        self.norm2 = _norm(layer.post_attention_layernorm)
        q_norm = getattr(attn, "q_norm", None)
        self.q_norm = _norm(q_norm) if q_norm is not None else None
        self.k_norm = _norm(attn.k_norm) if q_norm is not None else None


def _norm(module) -> tuple[torch.Tensor, float]:
    eps = getattr(module, "variance_epsilon", None)
    return module.weight, float(eps if eps is not None else module.eps)


def _rms(x: torch.Tensor, norm: tuple[torch.Tensor, float]) -> torch.Tensor:
    """Hugging Face's Llama RMSNorm, rounding included: normalised in float32, cast back, then scaled."""
    weight, eps = norm
    x32 = x.float()
    return weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class CachedDecoder:
    """Prefill, then one token per row per step; rows are re-indexed as they split or finish."""

    @torch.no_grad()
    def __init__(self, model, positions: int):
        """Ready to sample from `model` up to `positions` positions (the widest context plus the new tokens)."""
        inner = model.model
        attn = inner.layers[0].self_attn
        self.head_dim, self.scaling = attn.head_dim, attn.scaling
        self.layers = [_Layer(layer) for layer in inner.layers[:model.config.num_hidden_layers]]
        self.heads = self.layers[0].q_size // self.head_dim
        self.kv_heads = self.layers[0].kv_size // self.head_dim
        self.embed = inner.embed_tokens.weight
        self.final_norm = _norm(inner.norm)
        self.head_w, self.head_b = model.lm_head.weight, model.lm_head.bias
        self.capacity = positions
        span = torch.arange(positions, device=self.embed.device)[None]  # (1, T)
        cos, sin = inner.rotary_emb(self.embed[:1][None], span)  # (1, T, D)
        self.cos, self.sin = cos[0], sin[0]  # (T, D)
        self.cache = torch.zeros(0)  # (layers, 2, k, H_kv, T, D): every layer's keys and values, one tensor to re-index
        self.valid = torch.zeros((0, positions), dtype=torch.bool)  # (k, T) a written, real (non-pad) column
        self.filled = 0

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def _run(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The layers over `ids` (k, t) written at the next t columns → the last position's logits (k, V)."""
        batch, length = ids.shape
        start, end = self.filled, self.filled + ids.shape[1]
        cos = self.cos[positions][:, None]  # (k, 1, t, D)
        sin = self.sin[positions][:, None]
        hidden = F.embedding(ids, self.embed)  # (k, t, E)
        for i, w in enumerate(self.layers):
            qkv = F.linear(_rms(hidden, w.norm1), w.qkv_w, w.qkv_b)  # (k, t, q + 2 kv)
            q, k, v = qkv.split((w.q_size, w.kv_size, w.kv_size), dim=-1)
            q = q.view(batch, length, self.heads, self.head_dim)
            k = k.view(batch, length, self.kv_heads, self.head_dim)
            if w.q_norm is not None:
                q, k = _rms(q, w.q_norm), _rms(k, w.k_norm)
            q = self._rotate(q.transpose(1, 2), cos, sin)  # (k, H, t, D)
            keys, values = self.cache[i]  # (k, H_kv, T, D) views
            keys[:, :, start:end] = self._rotate(k.transpose(1, 2), cos, sin)
            values[:, :, start:end] = v.view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
            out = F.scaled_dot_product_attention(q, keys, values,
                                                 attn_mask=mask, scale=self.scaling,
                                                 enable_gqa=self.kv_heads != self.heads)  # (k, H, t, D)
            hidden = hidden + F.linear(out.transpose(1, 2).reshape(batch, length, -1), w.o_w, w.o_b)
            gate, up = F.linear(_rms(hidden, w.norm2), w.gate_up_w, w.gate_up_b).split(w.inter, dim=-1)
            hidden = hidden + F.linear(F.silu(gate) * up, w.down_w, w.down_b)
        self.filled = end
        return F.linear(_rms(hidden[:, -1], self.final_norm), self.head_w, self.head_b)  # (k, V)

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Left-padded contexts `ids`, `mask`, `positions` (k, P) → next-token logits (k, V)."""
        batch, width = ids.shape
        self.cache = self.embed.new_zeros((len(self.layers), 2, batch, self.kv_heads, self.capacity, self.head_dim))
        self.valid = torch.zeros((batch, self.capacity), dtype=torch.bool, device=ids.device)
        self.valid[:, :width] = mask.bool()
        self.filled = 0
        causal = torch.ones((width, width), dtype=torch.bool, device=ids.device).tril()  # (P, P)
        allowed = torch.zeros((batch, width, self.capacity), dtype=torch.bool, device=ids.device)
        allowed[:, :, :width] = causal[None] & self.valid[:, None, :width]  # (k, P, T): query row, key column
        allowed[:, :, :width] |= torch.eye(width, dtype=torch.bool, device=ids.device)  # a pad query sees itself
        return self._run(ids, positions, allowed[:, None])

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One new token per row (k,) at its position (k,) → next-token logits (k, V)."""
        if self.filled >= self.capacity:
            raise ValueError(f"the decoder was sized for {self.capacity} positions")
        self.valid[:, self.filled] = True
        mask = self.valid[:, None, None]  # (k, 1, 1, T)
        return self._run(tokens[:, None], positions[:, None], mask)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (k',) of the cache, in that order (a row may repeat)."""
        self.cache = self.cache.index_select(2, index)
        self.valid = self.valid.index_select(0, index)
