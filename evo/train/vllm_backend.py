"""vLLM rollout backend (`rollout.backend: vllm`): fast sampling on GPU, training stays in HF.

The policy being trained remains the Hugging Face model (the engine updates
it); `VllmPolicy` samples with a vLLM engine loaded from the same checkpoint and
receives the updated weights after every update (`sync_weights`). It implements
the same `Policy` interface as `HFPolicy`, so the rollout driver does not know
which backend it drives.

How it reaches the weights (vLLM's V1 engine, the release range the `gpu`
extra pins): the engine core runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
set here before the engine is built), so `LLM.collective_rpc` runs a function
on the engine's worker in-process and the worker's model loads the new tensors
with its own `load_weights` (which maps Hugging Face names onto vLLM's fused
layers) without copying them through a pipe. Then `LLM.reset_prefix_cache()`:
prompt KV cached under the old weights must not be reused by the next step
(peers do the same after every sync). In a data-parallel run every rank owns
an engine on its own GPU (`distributed_executor_backend="external_launcher"`:
vLLM joins the torchrun world as independent data-parallel replicas, each
generating for its own rank), and every rank syncs its engine.

Sampling seeds: each request's seed is its stream's (`evo.train.sampler.stream_seed`
of the call's seed and the trajectory's (group, sample)), so a trajectory is
sampled alike whichever rank or batch it falls in.

Needs the `vllm` package (the `gpu` extra) and a CUDA device. The CPU
test-suite drives this class against a stand-in engine (the order of the
weight load and the cache reset, the seeds); it has not run against a real
vLLM on these machines.
"""

from __future__ import annotations

import os
from typing import Hashable, Sequence

from evo.errors import MissingDependencyError, TrainError
from evo.recipe_spec import Rollout
from evo.train.sampler import stream_seed
from evo.train.types import Generation

# vLLM's default reserves 90% of the GPU for its KV cache; the trained model, its gradients and
# optimizer share the GPU here, so the engine takes a smaller share unless the recipe sets one.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.3


def _load_weights(worker, weights) -> int:
    """Runs on vLLM's worker (via `collective_rpc`): load `weights` (name, tensor) pairs into its model."""
    runner = getattr(worker, "worker", worker).model_runner  # a WorkerWrapperBase forwards to its worker
    model = runner.model if hasattr(runner, "model") else runner.get_model()
    loaded = model.load_weights(weights=weights)
    return len(loaded) if loaded is not None else len(weights)


class VllmPolicy:
    def __init__(self, hf_policy, model_path: str, options: dict | None = None, ranks=None):
        # The in-process engine core: the worker's model is reachable by collective_rpc without IPC.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        try:
            import vllm
        except ImportError:
            raise MissingDependencyError("vllm", "gpu", "rollout.backend: vllm") from None
        self._vllm = vllm
        self.hf = hf_policy
        self.tokenizer = hf_policy.tokenizer
        self.name = hf_policy.name
        kwargs = {"dtype": str(next(hf_policy.model.parameters()).dtype).replace("torch.", ""),
                  "enable_prefix_caching": True, "gpu_memory_utilization": DEFAULT_GPU_MEMORY_UTILIZATION}
        if ranks is not None and ranks.world > 1:
            kwargs.update(distributed_executor_backend="external_launcher", tensor_parallel_size=1)
        kwargs.update(options or {})
        self.llm = vllm.LLM(model=model_path, **kwargs)

    def encode_prompt(self, text: str) -> list[int]:
        return self.hf.encode_prompt(text)

    def encode_observation(self, text: str) -> list[int]:
        return self.hf.encode_observation(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.hf.decode(ids)

    def generate(self, prompts: Sequence[str], **kwargs) -> list[Generation]:
        return self.generate_ids([self.encode_prompt(p) for p in prompts], **kwargs)

    def generate_ids(self, prompt_ids: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float = 1.0,
                     top_p: float = 1.0, stop: Sequence[str] = (), seed: int | None = None,
                     streams: Sequence[Hashable] | None = None) -> list[Generation]:
        vllm = self._vllm
        if seed is None:
            seeds = [None] * len(prompt_ids)
        elif streams is not None:
            seeds = [stream_seed(seed, key) for key in streams]
        else:
            seeds = [int(seed) + i for i in range(len(prompt_ids))]  # one seed per request
        params = [
            vllm.SamplingParams(n=1, temperature=float(temperature), top_p=float(top_p), top_k=-1,
                                max_tokens=int(max_new_tokens), stop=list(stop), include_stop_str_in_output=True,
                                seed=s)
            for s in seeds
        ]
        prompts = [vllm.inputs.TokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        gens = []
        for out in outs:
            o = out.outputs[0]
            if o.finish_reason == "length":
                reason = "length"
            else:  # "stop": EOS when no stop string matched
                reason = "stop" if isinstance(o.stop_reason, str) else "eos"
            gens.append(Generation(o.text, list(o.token_ids), reason))
        return gens

    def sync_weights(self, weights: dict | None = None) -> None:
        """Load the trained weights into the vLLM engine, then drop its prefix cache (after each policy update).

        `weights`: full named tensors (the engine's `weights()`: gathered from
        FSDP shards when sharded); default: the HF model's state dict.
        """
        state = weights if weights is not None else self.hf.model.state_dict()
        try:
            self.llm.collective_rpc(_load_weights, args=(list(state.items()),))
        except AttributeError as exc:
            raise TrainError(f"rollout.backend: vllm: this vLLM version does not expose the worker model for "
                             f"weight sync ({exc}); install the release range evotrainer[gpu] pins") from None
        self.llm.reset_prefix_cache()  # cached prompt KV was computed by the old weights


def make_rollout_policy(rollout: Rollout, hf_policy, model_path: str, ranks=None):
    """The policy the rollout driver samples from (a recipe's `rollout` section): the HF policy itself, or a vLLM twin."""
    backend = rollout.backend
    if backend == "hf":
        return hf_policy
    if backend == "vllm":
        from evo.train.policy import resolve_model_path

        return VllmPolicy(hf_policy, resolve_model_path(model_path), rollout.vllm, ranks)
    raise TrainError(f"recipe.yaml: rollout.backend: {backend!r} is not a backend; use hf or vllm")
