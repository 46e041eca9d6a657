#!/usr/bin/env python
"""Build the embedded multi-domain policy `builtin:tiny-char-mix` (evo/data/tiny-char-mix/).

A tiny char-level Llama (evo.train.tiny) is pretrained by supervised learning
on a mixture of the three embedded domains' *train* splits (never validation):
arithmetic answers, calc episodes (tool use) and patch episodes (long horizon),
the demonstrations of `scripts/tiny_corpus.py`, for a fixed number of steps.
The shipped base must be clearly imperfect on every domain so that RL has
something to improve, in the way RL improves real SFT models: mostly by
sharpening a distribution whose mode is often right but whose samples are not.

- arithmetic: label smoothing (`--label-smoothing`, 0.2) keeps ~20% of each
  token's mass spread over the vocabulary, so a sample at temperature 1 breaks
  a long answer far more often than a short one; the loss is on the answer and
  its closing newline only.
- calc, patch: the demonstrators themselves are imperfect (rarely calling the
  calculator; a patch expert that slips), so the base imitates a mixture of
  good and bad habits; light label smoothing (`--episode-smoothing`, 0.01) and
  a loss on the policy's actions only (observations are context).

Each step draws a fixed number of examples per domain (`Corpus.BATCH`) and
weights the domains equally. Everything is seeded and runs on one thread; on
the same torch build the output is the same. The default run (1,500 steps,
~46 min on one thread of a shared 2-core machine) is what ships as
`builtin:tiny-char-mix`, the base of the calc and patch recipes (figures in
docs/domains.md). The embedded arithmetic default `builtin:tiny-char`
(evo/data/tiny-char/) is the older arithmetic-only build, kept so that every
arithmetic figure in the README stays the one measured.

    python scripts/build_tiny_model.py            # writes evo/data/tiny-char-mix/
    python scripts/build_tiny_model.py --out DIR --steps 300
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tiny_corpus import Corpus  # noqa: E402

from evo.train.tiny import build_tiny_model, save_tiny_model  # noqa: E402

EVAL_RECIPES = ("arithmetic-tiny.yaml", "arithmetic-tiny-ample.yaml", "calc-tiny.yaml", "calc-tiny-notool.yaml",
                "patch-tiny.yaml", "patch-tiny-short.yaml")
CHUNKS = {"patch": 2, "calc": 2}  # micro-batches by length: padding every episode to the longest costs 2x
MAX_POSITIONS = 512  # RoPE has no learned positions; this only has to cover the longest patch episode

def make_batch(tokenizer, corpus: Corpus, rng: random.Random):
    """A step's examples: per domain, micro-batches of similar length (little padding), each a tuple of
    (domain, (b, L) input ids right-padded, (b, L) labels with -100 outside the policy's text)."""
    out = []
    for domain, count in corpus.BATCH.items():
        rows = []
        for _ in range(count):
            ids: list[int] = []
            labels: list[int] = []
            for text, trained in corpus.draw(domain, rng):
                piece = tokenizer(text, add_special_tokens=False).input_ids
                ids += piece
                labels += piece if trained else [-100] * len(piece)
            rows.append((ids, labels))
        rows.sort(key=lambda r: len(r[0]))
        size = -(-count // CHUNKS.get(domain, 1))
        for part in (rows[i: i + size] for i in range(0, count, size)):
            width = max(len(r[0]) for r in part)
            ids = torch.full((len(part), width), tokenizer.pad_token_id, dtype=torch.long)  # (b, L)
            labels = torch.full((len(part), width), -100, dtype=torch.long)  # (b, L)
            for i, (x, y) in enumerate(part):
                ids[i, : len(x)] = torch.tensor(x)
                labels[i, : len(y)] = torch.tensor(y)
            out.append((domain, ids, labels))
    return out


def sequence_loss(logits, labels, smoothing: float):
    """Sum over examples of each example's mean token loss (a long episode counts as much as a short answer).

    logits (b, L, V) predict labels shifted by one.
    """
    targets = labels[:, 1:]  # (b, L-1)
    per_token = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100,
        label_smoothing=smoothing, reduction="none").view(targets.shape)  # (b, L-1)
    mask = (targets != -100).to(logits.dtype)  # (b, L-1)
    return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).sum()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--out", type=Path, default=ROOT / "evo" / "data" / "tiny-char-mix")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label-smoothing", type=float, default=0.2, help="arithmetic's label smoothing")
    ap.add_argument("--episode-smoothing", type=float, default=0.01,
                    help="label smoothing of the multi-turn domains' actions (calc, patch)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--no-eval", action="store_true", help="skip the Avg@8 evaluation at the end")
    ap.add_argument("--watch", action="store_true", help="also print every recipe's Avg@8 every --eval-every steps")
    ap.add_argument("--snapshots", action="store_true", help="also save the model every --eval-every steps "
                    "(to OUT-stepN), to evaluate elsewhere")
    args = ap.parse_args(argv)

    from evo.train.policy import HFPolicy, load_policy

    # One thread: the same reduction order on every machine (and no spin-waiting on a busy one).
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    corpus = Corpus()
    smoothing = {"arithmetic": args.label_smoothing, "calc": args.episode_smoothing, "patch": args.episode_smoothing}
    model, tokenizer = build_tiny_model(seed=args.seed, max_positions=MAX_POSITIONS)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tiny-char: {n_params:,} parameters; train tasks {json.dumps(corpus.sizes())}")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    # Warm-up, then a cosine decay to a tenth: the late small steps sharpen the actions the episodes need.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / args.steps))))
    model.train()
    start = time.time()
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = 0.0
        for domain, ids, labels in make_batch(tokenizer, corpus, rng):
            logits = model(input_ids=ids, attention_mask=(ids != tokenizer.pad_token_id).long()).logits  # (b, L, V)
            # Each domain's mean example loss, summed over domains: every domain pulls with equal weight.
            part = sequence_loss(logits, labels, smoothing[domain]) / corpus.BATCH[domain]
            part.backward()
            loss += part.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if (step + 1) % args.eval_every == 0 or step == 0:
            print(f"step {step + 1:5d}  loss {loss:.4f}  {time.time() - start:.0f}s", flush=True)
            if args.snapshots and step:
                save_tiny_model(model, tokenizer, args.out.with_name(f"{args.out.name}-step{step + 1}"))
            if args.watch and step:
                report(HFPolicy(model, tokenizer, "tiny-char"))
                model.train()
    save_tiny_model(model, tokenizer, args.out)
    print(f"wrote {args.out}")
    if not args.no_eval:
        report(load_policy(str(args.out)))
    return 0


def report(policy) -> None:
    """Avg@8 of `policy` under every embedded recipe (validation split, the recipes' eval seed)."""
    from evo.recipe import load_recipe
    from evo.train.evaluate import evaluate

    for name in EVAL_RECIPES:
        ev = evaluate(policy, load_recipe(ROOT / "recipes" / name), None)
        print(f"  {name}: " + json.dumps({k: ev[k] for k in ("avg_at_k", "per_stratum", "pass_at_k")}), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
