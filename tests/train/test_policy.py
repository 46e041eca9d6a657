"""Loading policies by path and sampling from them."""

import sys

import pytest
import torch

from evo.errors import TrainError
from evo.train.policy import HFPolicy, load_policy
from evo.train.tiny import CHARACTERS


def test_local_tiny_model_loads_by_path_and_samples_reproducibly(tiny_model_dir):
    policy = load_policy(str(tiny_model_dir))
    assert policy.tokenizer.padding_side == "left"
    assert not policy.use_chat_template  # no template: plain prompts
    a = policy.generate(["12+3=", "7*8="], max_new_tokens=5, seed=11)
    b = policy.generate(["12+3=", "7*8="], max_new_tokens=5, seed=11)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    for g in a:
        assert 1 <= len(g.token_ids) <= 5
        assert g.finish_reason in ("eos", "stop", "length")
        assert policy.decode(g.token_ids) == g.text or g.finish_reason == "stop"
    # Sampling does not disturb the caller's RNG.
    torch.manual_seed(0)
    x = torch.rand(1)
    torch.manual_seed(0)
    policy.generate(["1+1="], max_new_tokens=3, seed=1)
    assert torch.equal(torch.rand(1), x)


def test_builtin_tokenizer_round_trips_any_printable_text():
    policy = load_policy("builtin:tiny-char")
    text = "".join(CHARACTERS)
    ids = policy.tokenizer(text).input_ids
    assert len(ids) == len(text)
    assert policy.decode(ids) == text


class _FixedModel(torch.nn.Module):
    """Stands in for a HF model: `generate` appends fixed rows, to pin down finish handling."""

    def __init__(self, rows):
        super().__init__()
        self.rows = rows
        self.anchor = torch.nn.Parameter(torch.zeros(1))

    @property
    def device(self):
        return torch.device("cpu")

    def generate(self, input_ids, **kwargs):
        new = torch.tensor(self.rows)
        return torch.cat([input_ids, new], dim=1)


def test_finish_reasons_eos_stop_string_and_length(tiny_model_dir):
    real = load_policy(str(tiny_model_dir))
    tok = real.tokenizer
    enc = lambda s: tok(s, add_special_tokens=False).input_ids  # noqa: E731
    eos, pad = tok.eos_token_id, tok.pad_token_id
    rows = [
        enc("12") + [eos, pad, pad],  # ends with EOS: kept in the ids (trained on), not in the text
        enc("3\n") + [pad, pad, pad],  # single-token stop string: text keeps it
        enc("ab;;c"),  # multi-token stop string ";;": cut after it
        enc("98765"),  # no end within the limit
    ]
    policy = HFPolicy(_FixedModel(rows), tok, name="fixed")
    out = policy.generate_ids([enc("1+1=")] * 4, max_new_tokens=5, stop=["\n", ";;"])
    assert [g.finish_reason for g in out] == ["eos", "stop", "stop", "length"]
    assert [g.text for g in out] == ["12", "3\n", "ab;;", "98765"]
    assert out[0].token_ids == enc("12") + [eos]
    assert out[2].token_ids == enc("ab;;")


def test_a_folder_without_config_is_a_clear_error(tmp_path):
    with pytest.raises(TrainError, match="folder without config.json"):
        load_policy(str(tmp_path))
    with pytest.raises(TrainError, match="not a built-in model"):
        load_policy("builtin:huge")


def test_gpu_backends_report_a_missing_package_in_one_line(tiny_model_dir, monkeypatch):
    import importlib.util

    from evo.errors import MissingDependencyError
    from evo.recipe_spec import RecipeSpec
    from evo.train.engine import make_engine
    from evo.train.vllm_backend import make_rollout_policy

    from .conftest import small_recipe

    policy = load_policy(str(tiny_model_dir))
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(MissingDependencyError, match=r"rollout.backend: vllm needs the optional package 'vllm'"):
            make_rollout_policy(RecipeSpec.of(small_recipe(**{"rollout.backend": "vllm"})).rollout, policy,
                                str(tiny_model_dir))
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # as where it is not installed (the dev extra has it)
    with pytest.raises(MissingDependencyError, match=r"grpo.engine: deepspeed needs .*evotrainer\[gpu\]"):
        make_engine(RecipeSpec.of(small_recipe(**{"grpo.engine": "deepspeed"})), policy.model)
    assert make_rollout_policy(RecipeSpec.of(small_recipe()).rollout, policy, str(tiny_model_dir)) is policy
