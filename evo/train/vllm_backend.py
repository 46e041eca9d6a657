"""vLLM rollout backend (`rollout.backend: vllm`): fast sampling on GPU, training stays in HF.

The policy being trained remains the Hugging Face model (the engine updates
it); `VllmPolicy` samples with a vLLM engine loaded from the same checkpoint and
receives the updated weights after every step (`sync_weights`). It implements
the same `Policy` interface as `HFPolicy`, so the rollout driver does not know
which backend it drives.

Needs the `vllm` package (the `gpu` extra) and a CUDA device. It cannot run on
the CPU-only development machines; the CPU test-suite only checks that a
missing vLLM is reported as a one-line MissingDependencyError.
"""

from __future__ import annotations

from typing import Sequence

from evo.errors import MissingDependencyError, TrainError
from evo.train.types import Generation


class VllmPolicy:
    def __init__(self, hf_policy, model_path: str, options: dict | None = None):
        try:
            import vllm
        except ImportError:
            raise MissingDependencyError("vllm", "gpu", "rollout.backend: vllm") from None
        self._vllm = vllm
        self.hf = hf_policy
        self.tokenizer = hf_policy.tokenizer
        self.name = hf_policy.name
        kwargs = {"dtype": str(next(hf_policy.model.parameters()).dtype).replace("torch.", ""),
                  "enable_prefix_caching": True, **(options or {})}
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
                     top_p: float = 1.0, stop: Sequence[str] = (), seed: int | None = None) -> list[Generation]:
        vllm = self._vllm
        params = [
            vllm.SamplingParams(n=1, temperature=float(temperature), top_p=float(top_p), top_k=-1,
                                max_tokens=int(max_new_tokens), stop=list(stop), include_stop_str_in_output=True,
                                seed=None if seed is None else int(seed) + i)
            for i in range(len(prompt_ids))
        ]  # one seed per request: reproducible whatever the batch scheduling
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

    def sync_weights(self) -> None:
        """Push the trained HF weights into the vLLM engine (after each policy update)."""
        state = self.hf.model.state_dict()
        try:  # in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0 on V1): the worker's model is reachable
            runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
            runner.model.load_weights(state.items())
        except AttributeError as exc:
            raise TrainError(f"rollout.backend: vllm: this vLLM version does not expose the worker model for "
                             f"weight sync ({exc}); use a vLLM release supported by evotrainer[gpu]") from None


def make_rollout_policy(recipe: dict, hf_policy, model_path: str):
    """The policy the rollout driver samples from: the HF policy itself, or a vLLM twin."""
    backend = recipe["rollout"]["backend"]
    if backend == "hf":
        return hf_policy
    if backend == "vllm":
        return VllmPolicy(hf_policy, model_path, recipe["rollout"].get("vllm"))
    raise TrainError(f"recipe.yaml: rollout.backend: {backend!r} is not a backend; use hf or vllm")
