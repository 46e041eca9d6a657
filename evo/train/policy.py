"""Load a policy and sample from it (the CPU default backend: a lean KV-cached loop, or Hugging Face `generate`).

`load_policy("builtin:tiny-char")` loads the shipped checkpoint in
`evo/data/tiny-char/` (`builtin:tiny-char-mix`: `evo/data/tiny-char-mix/`); any
other name is a local folder (a `save_pretrained` output, e.g. a run's
`checkpoint/`) or a Hugging Face model id, and goes through the same `AutoModelForCausalLM` / `AutoTokenizer` path.

Sampling is plain ancestral sampling at `temperature` with optional nucleus
`top_p` and no top-k, so the log-probabilities the trainer computes (logits /
temperature, full softmax) are those of the distribution that was sampled.
`seed` makes a call reproducible without disturbing the global RNG, and
`streams` (one integer per row: its GRPO group or eval task) gives every
stream its own seeded draws, so a row samples the same tokens whichever other
rows share its batch (what makes a data-parallel rank's shard sample exactly
what one process would); `temperature <= 0` decodes greedily (a library
option: recipes require > 0).

Two samplers produce the same kind of result (ids ending with their end token,
finish reasons eos / stop / length): the lean KV-cached loop of
`evo.train.sampler` (default for decoder-only models with a plain key/value
cache; 2-3x faster than `generate` on CPU) and Hugging Face `generate` (any other
model, or `sampler="hf"`). Unlike `generate`, the lean loop ignores a model's
`generation_config` extras (repetition penalty and the like), which would make
the sampled distribution differ from the one the trainer scores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from evo.errors import TrainError
from evo.train.tiny import BUILTIN_MODELS, BUILTIN_PREFIX
from evo.train.types import Generation

_DTYPES = ("float32", "bfloat16", "float16")
SAMPLERS = ("auto", "lean", "hf")


def resolve_model_path(name_or_path: str) -> str:
    """`builtin:<name>` → the shipped folder; anything else is returned unchanged."""
    if not name_or_path.startswith(BUILTIN_PREFIX):
        return name_or_path
    from evo.resources import data_dir

    key = name_or_path[len(BUILTIN_PREFIX):]
    if key not in BUILTIN_MODELS:
        raise TrainError(f"model.name: {name_or_path!r} is not a built-in model; use one of "
                         + ", ".join(BUILTIN_PREFIX + k for k in BUILTIN_MODELS))
    folder = data_dir() / BUILTIN_MODELS[key]
    if not (folder / "config.json").exists():
        raise TrainError(f"model.name: {name_or_path!r}: the shipped checkpoint {folder} is missing; "
                         "rebuild it with `python scripts/build_tiny_model.py`")
    return str(folder)


class HFPolicy:
    """A causal LM + tokenizer that samples completions (implements `evo.train.types.Policy`)."""

    def __init__(self, model, tokenizer, name: str = "", use_chat_template: bool = True, sampler: str = "auto"):
        """`sampler`: "auto" (the lean loop where the model allows it, else `generate`), "lean" or "hf"."""
        if sampler not in SAMPLERS:
            raise TrainError(f"sampler: {sampler!r} is not a sampler; use one of {', '.join(SAMPLERS)}")
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.sampler = sampler
        self._lean_ok: bool | None = None  # auto: decided on first use (static check, then the cache's kind)
        self._stop_cache: dict = {}
        # The tiny char model has no chat template: prompts stay plain text.
        self.use_chat_template = bool(use_chat_template and getattr(tokenizer, "chat_template", None))
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    # -- prompts and observations ------------------------------------------------------------
    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a first-turn prompt (chat-formatted where the tokenizer has a template)."""
        if self.use_chat_template:
            rendered = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
            return self.tokenizer(rendered, add_special_tokens=False).input_ids
        return self.tokenizer(text).input_ids

    def encode_observation(self, text: str) -> list[int]:
        """Token ids appended after an action in a multi-turn episode (not trained on)."""
        if self.use_chat_template:
            # The delta between a conversation with and without the new user turn: the
            # template's own separators, so the model sees what it would in chat.
            base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]
            before = self.tokenizer.apply_chat_template(base, tokenize=False)
            after = self.tokenizer.apply_chat_template(base + [{"role": "user", "content": text}],
                                                       tokenize=False, add_generation_prompt=True)
            delta = after[len(before):] if after.startswith(before) else text
            return self.tokenizer(delta, add_special_tokens=False).input_ids
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    # -- sampling ------------------------------------------------------------------------------
    def _stop_token_ids(self, stop: Sequence[str]) -> tuple[list[int], list[str]]:
        """Split stop strings into single-token ones (cheap: extra EOS ids) and the rest."""
        key = tuple(stop)
        if key not in self._stop_cache:
            single, multi = [], []
            for s in stop:
                ids = self.tokenizer(s, add_special_tokens=False).input_ids
                if len(ids) == 1 and self.tokenizer.decode(ids) == s:
                    single.append(ids[0])
                else:
                    multi.append(s)
            self._stop_cache[key] = (single, multi)
        single, multi = self._stop_cache[key]
        return list(single), list(multi)

    def _stop_safe(self, stop_strings: list[str]) -> frozenset:
        from evo.train.sampler import stop_safe_tokens

        key = ("safe", tuple(stop_strings))
        if key not in self._stop_cache:  # decodes the vocabulary once per stop set
            self._stop_cache[key] = stop_safe_tokens(self.tokenizer, stop_strings) if stop_strings else frozenset()
        return self._stop_cache[key]

    def _use_lean(self) -> bool:
        from evo.train.sampler import lean_sampling_supported

        if self.sampler == "hf":
            return False
        if self._lean_ok is None:
            self._lean_ok = lean_sampling_supported(self.model)
            if not self._lean_ok and self.sampler == "lean":
                raise TrainError(f"sampler: 'lean' cannot drive model {self.name!r} ({type(self.model).__name__}); "
                                 "use sampler 'auto' or 'hf'")
        return self._lean_ok

    def generate(self, prompts: Sequence[str], *, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, stop: Sequence[str] = (), seed: int | None = None) -> list[Generation]:
        return self.generate_ids([self.encode_prompt(p) for p in prompts], max_new_tokens=max_new_tokens,
                                 temperature=temperature, top_p=top_p, stop=stop, seed=seed)

    def generate_ids(self, prompt_ids: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float = 1.0,
                     top_p: float = 1.0, stop: Sequence[str] = (), seed: int | None = None,
                     streams: Sequence | None = None) -> list[Generation]:
        """Sample one completion per prompt (token ids), all rows in one batch (see `streams` above)."""
        if not prompt_ids:
            return []
        tok = self.tokenizer
        eos = tok.eos_token_id
        stop_ids, stop_strings = self._stop_token_ids(stop)
        end_ids = [eos] + [i for i in stop_ids if i != eos]
        if self._use_lean():
            gens = self._generate_lean(prompt_ids, max_new_tokens, temperature, top_p, end_ids, stop_strings, seed,
                                       streams)
            if gens is not None:
                return gens
        return self._generate_hf(prompt_ids, max_new_tokens, temperature, top_p, end_ids, stop_strings, seed,
                                 streams)

    def _generate_lean(self, prompt_ids, max_new_tokens, temperature, top_p, end_ids, stop_strings, seed, streams):
        """The lean KV-cached loop; None when this model's cache turns out not to suit it."""
        import torch

        from evo.train.sampler import LeanSamplingUnsupported, sample

        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():  # not inference_mode: a buffer a model updates lazily must stay usable in training
                return sample(
                    self.model, prompt_ids, max_new_tokens=int(max_new_tokens), temperature=float(temperature),
                    top_p=float(top_p), eos_id=self.tokenizer.eos_token_id, end_ids=end_ids,
                    pad_id=self.tokenizer.pad_token_id, decode=self.decode, stop_strings=stop_strings,
                    stop_safe=self._stop_safe(stop_strings), seed=seed, streams=streams)
        except LeanSamplingUnsupported as exc:
            if self.sampler == "lean":
                raise TrainError(f"sampler: 'lean' cannot drive model {self.name!r}: {exc}; "
                                 "use sampler 'auto' or 'hf'") from None
            self._lean_ok = False
            return None
        except Exception as exc:  # surface generation failures as one line
            raise TrainError(f"generation failed for model {self.name!r}: {type(exc).__name__}: {exc}") from exc
        finally:
            self.model.train(was_training)

    def _generate_hf(self, prompt_ids, max_new_tokens, temperature, top_p, end_ids, stop_strings, seed,
                     streams=None):
        """One Hugging Face `generate` call over the left-padded batch.

        With `streams` each row draws from its own stream (as in the lean loop):
        a logits processor samples the token and leaves only it for greedy
        search, since `generate`'s own sampler draws every row from one RNG.
        """
        import torch

        tok = self.tokenizer
        eos = tok.eos_token_id
        pad = tok.pad_token_id
        width = max(len(p) for p in prompt_ids)
        input_ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)  # (B, P) left-padded
        attention = torch.zeros((len(prompt_ids), width), dtype=torch.long)  # (B, P)
        for row, ids in enumerate(prompt_ids):
            if ids:
                input_ids[row, width - len(ids):] = torch.tensor(list(ids), dtype=torch.long)
                attention[row, width - len(ids):] = 1
        extra = {"stop_strings": stop_strings, "tokenizer": tok} if stop_strings else {}
        recorder = _EntropyRecorder()
        processors = [recorder]
        if temperature > 0 and streams is not None and seed is not None:
            from evo.train.sampler import stream_seed

            extra.update(do_sample=False)
            processors = [_StreamDraw([stream_seed(seed, key) for key in streams], width, float(temperature),
                                      float(top_p), recorder)]
        elif temperature > 0:
            extra.update(do_sample=True, temperature=float(temperature), top_p=float(top_p), top_k=0)
        else:
            extra.update(do_sample=False)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                if seed is not None:
                    torch.manual_seed(seed)
                out = self.model.generate(
                    input_ids=input_ids.to(self.model.device), attention_mask=attention.to(self.model.device),
                    max_new_tokens=int(max_new_tokens), eos_token_id=end_ids, pad_token_id=pad,
                    logits_processor=processors, **extra,
                )  # (B, P + new)
        except Exception as exc:  # surface generation failures as one line
            raise TrainError(f"generation failed for model {self.name!r}: {type(exc).__name__}: {exc}") from exc
        finally:
            self.model.train(was_training)
        new = out[:, width:].tolist()  # (B, new)
        gens = [self._finish(row, set(end_ids), eos, stop_strings, max_new_tokens) for row in new]
        steps = torch.stack(recorder.steps, dim=1) if recorder.steps else torch.zeros((len(gens), 0))  # (B, new)
        for row, g in enumerate(gens):
            if g.token_ids and steps.shape[1] >= len(g.token_ids):
                g.entropy = float(steps[row, : len(g.token_ids)].mean())
        return gens

    def _finish(self, row: list[int], end_ids: set, eos: int, stop_strings: list[str], max_new_tokens: int) -> Generation:
        """Cut a generated row at its end and say why it ended."""
        for i, t in enumerate(row):
            if t in end_ids:
                ids = row[: i + 1]
                return Generation(self.decode(ids), ids, "eos" if t == eos else "stop")
        if stop_strings:
            for i in range(len(row)):
                text = self.decode(row[: i + 1])
                for s in stop_strings:
                    if s in text:
                        return Generation(text[: text.index(s) + len(s)], row[: i + 1], "stop")
        return Generation(self.decode(row), row, "length" if len(row) >= max_new_tokens else "eos")

    def save(self, out_dir: str | Path, state_dict: dict | None = None) -> Path:
        """`save_pretrained` of model and tokenizer; `state_dict` replaces the model's own (e.g. gathered from FSDP shards)."""
        from transformers.utils import logging as hf_logging

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        try:
            self.model.save_pretrained(out, safe_serialization=True, state_dict=state_dict)
            self.tokenizer.save_pretrained(out)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        return out


class _StreamDraw:
    """A logits processor that samples each row from its own stream and leaves only that token to greedy search."""

    def __init__(self, bases: list[int], prompt_width: int, temperature: float, top_p: float, recorder):
        self.bases, self.width, self.temperature, self.top_p, self.recorder = bases, prompt_width, temperature, top_p, recorder

    def __call__(self, input_ids, scores):
        import torch

        from evo.train.sampler import draw_tokens, stream_uniforms

        n = scores.shape[0]
        uniforms = stream_uniforms(self.bases, input_ids.shape[1] - self.width)  # (B,)
        tokens, entropy = draw_tokens(scores, torch.arange(n, device=scores.device), self.temperature, self.top_p,
                                None, uniforms)  # (B,), (B,)
        self.recorder.steps.append(entropy.cpu())
        forced = torch.full_like(scores, float("-inf"))  # (B, V)
        forced[torch.arange(n, device=scores.device), tokens] = 0.0
        return forced


class _EntropyRecorder:
    """A logits processor that only watches: the entropy of each step's sampling distribution.

    `generate` runs custom processors after its own temperature / top-p warpers,
    so these are the probabilities the tokens were actually drawn from.
    """

    def __init__(self):
        self.steps: list = []

    def __call__(self, input_ids, scores):
        import torch

        logp = torch.log_softmax(scores.float(), dim=-1)  # (B, V)
        p = logp.exp()
        self.steps.append(-(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1).cpu())  # (B,)
        return scores


def load_policy(name_or_path: str, dtype: str = "float32", *, chat_template: bool = True,
                device: str | None = None, sampler: str = "auto") -> HFPolicy:
    """Load `builtin:tiny-char`, a local checkpoint folder, or a Hugging Face id as an `HFPolicy`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype not in _DTYPES:
        raise TrainError(f"model.dtype: {dtype!r} is not supported; use one of {', '.join(_DTYPES)}")
    path = resolve_model_path(str(name_or_path))
    local = Path(path).expanduser()
    if local.exists() and not (local / "config.json").exists():
        raise TrainError(f"model.name: {path!r} is a folder without config.json; point it at a "
                         "save_pretrained checkpoint (e.g. a run's checkpoint/)")
    source = str(local) if local.exists() else path
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a per-load "Loading weights" bar is noise in a training run
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=getattr(torch, dtype))
    except OSError as exc:
        raise TrainError(f"model.name: {path!r} is neither a local checkpoint folder nor a loadable "
                         f"Hugging Face model id ({str(exc).splitlines()[0]})") from None
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    tokenizer.padding_side = "left"
    if device:
        model.to(device)
    return HFPolicy(model, tokenizer, name=str(name_or_path), use_chat_template=chat_template, sampler=sampler)
