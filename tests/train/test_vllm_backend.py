"""The vLLM rollout backend against a stand-in `vllm` module (no GPU here): weight sync order, seeds, setup."""

import os
import sys
import types

import pytest
import torch

from evo.train.distributed import Ranks
from evo.train.policy import load_policy
from evo.train.sampler import stream_seed


class FakeLLM:
    """Records what the backend asks of vLLM's `LLM`, and runs collective_rpc callables on a fake worker."""

    def __init__(self, model, **kwargs):
        self.model_path, self.kwargs = model, kwargs
        self.multiprocessing_env = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        self.calls = []
        self.loaded = {}
        llm = self

        class Model:
            def load_weights(self, weights):
                llm.calls.append("load_weights")
                llm.loaded = {name: t.clone() for name, t in weights}
                return set(llm.loaded)

        # What collective_rpc hands a callable in vLLM's in-process executor: a wrapper forwarding to the worker.
        self.worker = types.SimpleNamespace(worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(model=Model())))

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.calls.append("collective_rpc")
        return [method(self.worker, *args, **(kwargs or {}))]

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")
        return True

    def generate(self, prompts, params, use_tqdm=False):
        self.calls.append("generate")
        self.params = params
        out = types.SimpleNamespace(text="12\n", token_ids=[4, 5, 6], finish_reason="stop", stop_reason="\n")
        return [types.SimpleNamespace(outputs=[out]) for _ in prompts]


@pytest.fixture()
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    module.inputs = types.SimpleNamespace(TokensPrompt=lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids})
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    return module


def test_weight_sync_loads_the_trained_weights_then_resets_the_prefix_cache(fake_vllm, tiny_model_dir):
    from evo.train.vllm_backend import VllmPolicy

    hf = load_policy(str(tiny_model_dir))
    policy = VllmPolicy(hf, str(tiny_model_dir))
    llm = policy.llm
    assert llm.multiprocessing_env == "0", "the in-process engine core must be set up before the engine is built"
    assert llm.kwargs["enable_prefix_caching"] is True and "distributed_executor_backend" not in llm.kwargs

    with torch.no_grad():
        for p in hf.model.parameters():
            p.add_(1.0)  # an "update"
    policy.sync_weights()
    assert llm.calls == ["collective_rpc", "load_weights", "reset_prefix_cache"]
    state = hf.model.state_dict()
    assert llm.loaded.keys() == state.keys() and all(torch.equal(llm.loaded[k], state[k]) for k in state)

    gathered = {k: v + 1 for k, v in state.items()}  # e.g. full weights gathered from FSDP shards
    policy.sync_weights(gathered)
    assert llm.calls[-3:] == ["collective_rpc", "load_weights", "reset_prefix_cache"]
    assert all(torch.equal(llm.loaded[k], gathered[k]) for k in gathered)


def test_requests_are_seeded_by_their_stream_and_ranks_use_the_external_launcher(fake_vllm, tiny_model_dir):
    from evo.train.vllm_backend import VllmPolicy

    hf = load_policy(str(tiny_model_dir))
    policy = VllmPolicy(hf, str(tiny_model_dir), {"gpu_memory_utilization": 0.5},
                        ranks=Ranks(rank=1, world=2, local_rank=1))
    assert policy.llm.kwargs["distributed_executor_backend"] == "external_launcher"
    assert policy.llm.kwargs["tensor_parallel_size"] == 1 and policy.llm.kwargs["gpu_memory_utilization"] == 0.5
    gens = policy.generate_ids([[1, 2], [1, 2]], max_new_tokens=4, seed=9, streams=[(3, 0), (3, 1)])
    assert [p.seed for p in policy.llm.params] == [stream_seed(9, (3, 0)), stream_seed(9, (3, 1))]
    assert [g.finish_reason for g in gens] == ["stop", "stop"] and gens[0].token_ids == [4, 5, 6]
