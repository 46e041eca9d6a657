"""The lean KV-cached sampling loop (evo.train.sampler) against Hugging Face `generate`."""

import pytest
import torch

from evo.errors import TrainError
from evo.train.policy import HFPolicy, load_policy
from evo.train.tiny import build_char_tokenizer


def _same(a, b):
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.finish_reason for g in a] == [g.finish_reason for g in b]
    assert [g.text for g in a] == [g.text for g in b]
    assert [g.entropy for g in a] == pytest.approx([g.entropy for g in b], abs=1e-4)


def _no_generate(*args, **kwargs):
    raise AssertionError("the lean sampler must not call model.generate")


def test_greedy_matches_generate_on_the_builtin_llama_with_groups_and_limits():
    from evo.domains.arithmetic import ArithmeticEnv

    lean = load_policy("builtin:tiny-char")
    hf = HFPolicy(lean.model, lean.tokenizer, name="hf", sampler="hf")
    lean.model.generate = _no_generate  # instance attribute: only the lean policy's calls see it
    try:
        tasks = ArithmeticEnv(n_validation=12, n_train=12).tasks("validation")
        prompts = [lean.encode_prompt(t.prompt) for t in tasks for _ in range(3)]  # groups share a prompt
        for limit in (8, 3):  # 3: the longer answers cannot finish
            a = lean.generate_ids(prompts, max_new_tokens=limit, temperature=0.0, stop=["\n"])
            del lean.model.generate
            b = hf.generate_ids(prompts, max_new_tokens=limit, temperature=0.0, stop=["\n"])
            lean.model.generate = _no_generate
            _same(a, b)
            assert all(g.token_ids == a[3 * (i // 3)].token_ids for i, g in enumerate(a))  # greedy: a group agrees
        assert {g.finish_reason for g in a} == {"stop", "length"}
    finally:
        lean.model.__dict__.pop("generate", None)


def test_greedy_matches_generate_on_a_gpt2_built_from_a_config():
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = build_char_tokenizer()
    config = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                        initializer_range=0.3)  # peaked logits: no near-ties for float noise to flip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(config)
    lean, hf = HFPolicy(model, tok, sampler="lean"), HFPolicy(model, tok, sampler="hf")
    prompts = ["12+3=", "7*8=", "12+3=", "100-99=", "7*8=", "1="]  # left padding and repeated prompts
    free = lean.generate(prompts, max_new_tokens=6, temperature=0.0)
    assert {g.finish_reason for g in free} == {"length"}
    # Stops taken from what the model writes: a 2-character one inside row 1, a 1-character one in row 3.
    stop = [free[1].text[1:3], free[3].text[2]]
    a = lean.generate(prompts, max_new_tokens=6, temperature=0.0, stop=stop)
    b = hf.generate(prompts, max_new_tokens=6, temperature=0.0, stop=stop)
    _same(a, b)
    assert a[1].finish_reason == "stop" and a[1].text.endswith(stop[0]) and len(a[1].token_ids) <= 3
    assert a[3].finish_reason == "stop" and a[3].text.endswith(stop[1])


class _BigramLM(torch.nn.Module):
    """A causal LM stand-in for the lean loop: the next token is a fixed function of the current one.

    It keeps a real `DynamicCache` (one layer, the token ids as keys) so the loop's
    cache expansion and row dropping run as with a transformer.
    """

    def __init__(self, table: dict[int, int], vocab: int, plain_cache: bool = True):
        super().__init__()
        from types import SimpleNamespace

        self.config = SimpleNamespace(is_encoder_decoder=False)
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.vocab, self.plain_cache = vocab, plain_cache
        self.next = torch.arange(vocab)
        for a, b in table.items():
            self.next[a] = b
        self.seen: list[int] = []  # rows per forward call

    @property
    def device(self):
        return torch.device("cpu")

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=True, logits_to_keep=0):
        from transformers.cache_utils import DynamicCache
        from transformers.modeling_outputs import CausalLMOutputWithPast

        self.seen.append(input_ids.shape[0])
        if cache is None:
            cache = DynamicCache() if self.plain_cache else object()
        if self.plain_cache:
            keys = input_ids[:, None, :, None].float()  # (B, 1, T, 1)
            cache.update(keys, keys, 0)
            assert cache.layers[0].keys.shape[0] == input_ids.shape[0]  # cache rows follow the batch
        logits = torch.nn.functional.one_hot(self.next[input_ids], self.vocab).float() * 50  # (B, T, V)
        return CausalLMOutputWithPast(logits=logits, cache=cache)


def test_eos_stop_tokens_stop_strings_and_length_give_the_right_finish_reasons():
    tok = build_char_tokenizer()
    enc = lambda s: tok(s, add_special_tokens=False).input_ids  # noqa: E731
    eos = tok.eos_token_id
    chain = {}
    for start, text, end in (("a", "12", eos), ("b", "3\n", None), ("c", "x;;", None), ("d", "98765", None)):
        ids = enc(start + text) + ([end] if end is not None else [])
        chain.update(zip(ids, ids[1:]))
    model = _BigramLM(chain, len(tok))
    policy = HFPolicy(model, tok, name="bigram", sampler="lean")
    prompts = [enc(p) for p in ("a", "b", "c", "d", "a", "d")]
    for temperature in (0.0, 1.0):  # logits this peaked sample the same tokens
        model.seen.clear()
        out = policy.generate_ids(prompts, max_new_tokens=5, stop=["\n", ";;"], temperature=temperature, seed=1)
        assert [g.finish_reason for g in out] == ["eos", "stop", "stop", "length", "eos", "length"]
        assert [g.text for g in out] == ["12", "3\n", "x;;", "98765", "12", "98765"]
        assert out[0].token_ids == enc("12") + [eos]  # EOS stays in the ids (trained on), not in the text
        assert out[2].token_ids == enc("x;;") and out[3].token_ids == enc("98765")
        assert all(g.entropy == pytest.approx(0.0, abs=1e-6) for g in out)
        # Only distinct contexts are computed: 4 prompts, then the 4 distinct continuations (the two
        # "a" rows and the two "d" rows drew the same tokens), then fewer as rows finish ("3\n" after
        # 2 tokens, "12<eos>" and "x;;" after 3); the loop ends when every row has.
        assert model.seen == [4, 4, 3, 1, 1]


def test_an_unsuitable_cache_falls_back_to_generate_and_lean_says_why():
    tok = build_char_tokenizer()
    model = _BigramLM({}, len(tok), plain_cache=False)
    calls = []

    def generate(input_ids, **kwargs):
        calls.append(kwargs)
        return torch.cat([input_ids, torch.full((input_ids.shape[0], 2), tok.eos_token_id)], dim=1)

    model.generate = generate
    auto = HFPolicy(model, tok, name="odd")
    out = auto.generate(["1+1=", "2+2="], max_new_tokens=4, seed=3)
    assert len(calls) == 1 and [g.finish_reason for g in out] == ["eos", "eos"]
    auto.generate(["1+1="], max_new_tokens=4, seed=3)
    assert len(calls) == 2 and len(model.seen) == 1  # decided once: no second lean attempt
    with pytest.raises(TrainError, match="sampler: 'lean' cannot drive model 'odd'"):
        HFPolicy(model, tok, name="odd", sampler="lean").generate(["1+1="], max_new_tokens=4)
    with pytest.raises(TrainError, match="sampler: 'fast' is not a sampler"):
        HFPolicy(model, tok, sampler="fast")


def test_same_seed_same_samples_and_a_tiny_top_p_is_greedy(tiny_model_dir):
    policy = load_policy(str(tiny_model_dir))
    prompts = ["12+3=", "7*8=", "12+3="] * 4
    a = policy.generate(prompts, max_new_tokens=6, seed=5)
    b = policy.generate(prompts, max_new_tokens=6, seed=5)
    c = policy.generate(prompts, max_new_tokens=6, seed=6)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    assert len({tuple(a[i].token_ids) for i in range(0, 12, 3)}) > 1  # a group's samples differ
    assert all(g.entropy > 0 for g in a)
    nucleus = policy.generate(prompts, max_new_tokens=6, top_p=1e-6, seed=5)  # only the top token survives
    greedy = policy.generate(prompts, max_new_tokens=6, temperature=0.0)
    assert [g.token_ids for g in nucleus] == [g.token_ids for g in greedy]
    assert all(g.entropy == pytest.approx(0.0, abs=1e-6) for g in nucleus)
