"""The direct decoder (evo.train.decoder) computes what each supported model's own forward computes."""

import pytest
import torch

from evo.train.decoder import CachedDecoder, supports
from evo.train.policy import HFPolicy
from evo.train.tiny import build_char_tokenizer


def _model(kind: str, **extra):
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    tok = build_char_tokenizer()
    common = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    configs = {
        "llama": lambda: LlamaForCausalLM(LlamaConfig(**common, attention_bias=True, **extra)),
        "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**common, **extra)),  # q/k/v biases
        "qwen3": lambda: Qwen3ForCausalLM(Qwen3Config(**common, head_dim=16, **extra)),  # per-head q/k norms
        "gpt2": lambda: GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=1,
                                                   n_head=2)),
    }
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = configs[kind]()
        for p in model.parameters():  # no zero biases or unit norms: every weight must matter
            p.data.add_(torch.randn_like(p) * 0.05)
    return model.eval(), tok


def _left_padded(rows, pad):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_prefill_steps_and_reordered_rows_give_the_model_forwards_logits(kind):
    model, tok = _model(kind)
    assert supports(model)
    rows = [[5, 9, 14, 7], [30, 31], [8, 8, 8, 8, 8, 2], [44]]  # left padding of 2, 4 and 5 columns
    ids, mask, pos = _left_padded(rows, tok.pad_token_id)
    decoder = CachedDecoder(model, ids.shape[1] + 3)
    got = [decoder.prefill(ids, mask, pos)]
    order = torch.tensor([2, 0, 0, 3])  # row 1 finished, row 0 split in two
    decoder.reorder(order)
    tokens = [torch.tensor([11, 12, 13, 14]), torch.tensor([21, 22, 23, 24])]
    positions = mask.sum(-1).index_select(0, order)
    for t in tokens:
        got.append(decoder.step(t, positions))
        positions = positions + 1
    with torch.no_grad():  # the whole sequences through the model's own forward
        want = [model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]]
        full = [rows[i] for i in order.tolist()]
        for n in (1, 2):
            seqs = [f + [int(tokens[j][i]) for j in range(n)] for i, f in enumerate(full)]
            s_ids, s_mask, s_pos = _left_padded(seqs, tok.pad_token_id)
            want.append(model(input_ids=s_ids, attention_mask=s_mask, position_ids=s_pos).logits[:, -1])
    for g, w in zip(got, want):
        assert torch.allclose(g, w, atol=1e-5, rtol=1e-4), (g - w).abs().max()


def test_it_sees_the_weights_as_they_are_when_sampling_starts():
    model, tok = _model("llama")
    ids, mask, pos = _left_padded([[5, 6, 7]], tok.pad_token_id)
    before = CachedDecoder(model, 4).prefill(ids, mask, pos)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight.mul_(2.0)  # an optimizer step changes weights in place
    after = CachedDecoder(model, 4).prefill(ids, mask, pos)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
    assert not torch.allclose(before, after)
    assert torch.allclose(after, want, atol=1e-5, rtol=1e-4)


def test_models_it_would_not_compute_exactly_keep_their_own_forward():
    assert not supports(_model("gpt2")[0])
    assert not supports(_model("qwen2", use_sliding_window=True, sliding_window=4, max_window_layers=0)[0])
    assert not supports(_model("llama", rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                         "rope_theta": 10000.0})[0])
    longrope = {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 4.0, "short_factor": [1.0] * 4,
                "long_factor": [2.0] * 4, "original_max_position_embeddings": 16}  # its table depends on the length
    assert not supports(_model("llama", rope_parameters=longrope)[0])


def _hf_logits(model, rows, pad):
    ids, mask, pos = _left_padded(rows, pad)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]


def test_in_bfloat16_it_rounds_as_the_model_forward_does():
    model, tok = _model("qwen3")
    model = model.to(torch.bfloat16)
    rows = [[5, 9, 14, 7, 3, 3, 21], [30, 31], [44, 2, 2]]
    ids, mask, pos = _left_padded(rows, tok.pad_token_id)
    got = CachedDecoder(model, ids.shape[1]).prefill(ids, mask, pos).float()
    want = _hf_logits(model, rows, tok.pad_token_id).float()
    float32 = _hf_logits(_model("qwen3")[0], rows, tok.pad_token_id)
    # as close to the bf16 forward as bf16 rounding of the same operations, and closer than bf16 is to fp32
    assert (got - want).abs().max() < 0.25 * (want - float32).abs().max()
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_layers_past_the_configured_count_are_skipped_as_the_model_forward_skips_them():
    model, tok = _model("llama")
    model.config.num_hidden_layers = 1  # Hugging Face runs layers[:num_hidden_layers]
    rows = [[5, 6, 7], [9]]
    ids, mask, pos = _left_padded(rows, tok.pad_token_id)
    got = CachedDecoder(model, ids.shape[1]).prefill(ids, mask, pos)
    assert torch.allclose(got, _hf_logits(model, rows, tok.pad_token_id), atol=1e-5, rtol=1e-4)


def test_an_empty_context_keeps_the_model_forward():
    import evo.train.sampler as sampler

    model, _ = _model("llama")
    assert isinstance(sampler._stepper(model, 8, [(5, 6), (7,)]), CachedDecoder)
    assert isinstance(sampler._stepper(model, 8, [(5, 6), ()]), sampler._HFStepper)


def test_sampling_through_it_draws_what_the_model_forward_draws():
    model, tok = _model("qwen3")
    direct = HFPolicy(model, tok, sampler="lean")
    own = HFPolicy(model, tok, sampler="lean")
    prompts = [direct.encode_prompt(p) for p in ("12+3=", "7*8=", "12+3=", "1=")]
    streams = [(0, 0), (1, 0), (0, 1), (2, 0)]
    a = direct.generate_ids(prompts, max_new_tokens=8, temperature=1.0, seed=4, streams=streams)
    import evo.train.sampler as sampler

    original = sampler._stepper
    sampler._stepper = lambda m, n, c: sampler._HFStepper(m)  # the same loop on the model's own forward
    try:
        b = own.generate_ids(prompts, max_new_tokens=8, temperature=1.0, seed=4, streams=streams)
    finally:
        sampler._stepper = original
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.entropy for g in a] == pytest.approx([g.entropy for g in b], abs=1e-5)
    assert len({tuple(g.token_ids) for g in a}) > 1
