"""Rollout sampling speed on the embedded default: the direct decoder against the model's own forward.

The lean sampler (`evo.train.sampler`) drives a Llama-family model through
`evo.train.decoder.CachedDecoder`, which computes the model's function with few
tensor operations per token; any other model goes through its own Hugging Face
forward in the same loop. This bench samples one GRPO step's rollouts of the
embedded default (builtin:tiny-char on arithmetic's train prompts, G = 8
samples per prompt, 12 new tokens at most, seeded streams as in training) three
ways, on one thread, alternating within each round so drift in machine load
falls on all alike:

- `decoder`: the shipped path;
- `forward`: the same loop with the Hugging Face forward and its KV cache (the named peer);
- `generate`: Hugging Face `generate` (sampler "hf").

at 32 prompts (a one-rank step) and 16 (each rank's half of it at two
ranks). Each figure is the median over rounds of the mean seconds per call.
It checks that `decoder` and `forward` drew the same tokens. The
`half_rows_speedup` figures say how much faster half the rows sample: what
data-parallel sampling can gain at most per rank.

    .venv/bin/python bench/sampling_speed.py [--rounds 7] [--calls 5]

Ends with one JSON line; the goal: the decoder faster than the forward at both sizes ("met").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import evo.train.sampler as sampler  # noqa: E402
from evo.domains import get_environment  # noqa: E402
from evo.train.policy import HFPolicy, load_policy  # noqa: E402

SAMPLES, MAX_NEW = 8, 12
SIZES = (32, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=5, help="sampling calls per timing")
    args = parser.parse_args()
    torch.set_num_threads(1)

    policy = load_policy("builtin:tiny-char")
    hf = HFPolicy(policy.model, policy.tokenizer, name="hf", sampler="hf")
    env = get_environment("arithmetic", {})
    prompts = [policy.encode_prompt(t.prompt) for t in env.tasks("train")[: max(SIZES)]]
    own_stepper = sampler._stepper

    def call(way: str, n: int, seed: int):
        rows = [p for p in prompts[:n] for _ in range(SAMPLES)]
        streams = [(i // SAMPLES, i % SAMPLES) for i in range(len(rows))]
        kwargs = dict(max_new_tokens=MAX_NEW, temperature=1.0, stop=env.stop, seed=seed, streams=streams)
        if way == "generate":
            return hf.generate_ids(rows, **kwargs)
        if way == "forward":
            sampler._stepper = lambda model, positions, contexts: sampler._HFStepper(model)
        try:
            return policy.generate_ids(rows, **kwargs)
        finally:
            sampler._stepper = own_stepper

    ways = ("decoder", "forward", "generate")
    same = all([g.token_ids for g in call("decoder", n, 7)] == [g.token_ids for g in call("forward", n, 7)]
               for n in SIZES)
    times = {(w, n): [] for w in ways for n in SIZES}
    for way in ways:  # warm-up
        call(way, SIZES[0], 0)
    for r in range(args.rounds):
        for n in SIZES:
            for way in ways:
                start = time.perf_counter()
                for c in range(args.calls):
                    call(way, n, 100 * r + c)
                times[(way, n)].append((time.perf_counter() - start) / args.calls)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{w}@{n} {times[(w, n)][-1] * 1000:.1f} ms" for n in SIZES for w in ways), file=sys.stderr, flush=True)

    median = {k: statistics.median(v) for k, v in times.items()}
    figures = {f"{w}_s_at_{n}": round(median[(w, n)], 4) for n in SIZES for w in ways}
    speedup = {n: median[("forward", n)] / median[("decoder", n)] for n in SIZES}
    out = {
        "bench": "sampling_speed", "model": "builtin:tiny-char", "domain": "arithmetic",
        "samples_per_prompt": SAMPLES, "max_new_tokens": MAX_NEW, "rounds": args.rounds, "calls": args.calls,
        **figures,
        **{f"decoder_vs_forward_at_{n}": round(speedup[n], 3) for n in SIZES},
        **{f"decoder_vs_generate_at_{n}": round(median[("generate", n)] / median[("decoder", n)], 3) for n in SIZES},
        **{f"half_rows_speedup_{w}": round(median[(w, SIZES[0])] / median[(w, SIZES[1])], 3) for w in ways},
        "same_tokens_as_forward": same,
        "goal": "decoder faster than the model's own forward in the same loop at both sizes",
        "met": bool(same and all(s > 1.0 for s in speedup.values())),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
