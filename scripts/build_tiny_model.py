#!/usr/bin/env python
"""Build the embedded default policy `builtin:tiny-char` (evo/data/tiny-char/).

A tiny char-level Llama (evo.train.tiny) is pretrained by supervised learning
on the arithmetic domain's *train* split (never validation) for a fixed number
of steps. The shipped base must be clearly imperfect (roughly 30-50% Avg@8 at
temperature 1 overall, weakest on the hard stratum) so that RL has something
to improve, in the way RL improves real SFT models: mostly by sharpening a
distribution whose mode is often right but whose samples are not. Label
smoothing (`--label-smoothing`, 0.2) produces exactly that: the model learns
the answers, yet keeps ~20% of each token's mass spread over the vocabulary,
so a sample at temperature 1 breaks a long answer far more often than a short
one. Loss is on the answer and its closing newline only. Everything is seeded and runs on one thread; on the same
torch build the output is the same.

    python scripts/build_tiny_model.py            # writes evo/data/tiny-char/
    python scripts/build_tiny_model.py --out DIR --steps 300
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evo.domains.arithmetic import ArithmeticEnv  # noqa: E402
from evo.train.tiny import build_tiny_model, save_tiny_model  # noqa: E402

# Per-stratum sampling weights (easy has only a few hundred distinct problems).
STRATUM_WEIGHTS = {"easy": 0.3, "medium": 0.4, "hard": 0.3}


def make_batch(tokenizer, tasks, rng: random.Random, batch_size: int):
    """(B, L) input ids right-padded, and (B, L) labels with -100 outside the answers."""
    by_stratum: dict[str, list] = {}
    for t in tasks:
        by_stratum.setdefault(t.stratum, []).append(t)
    names = sorted(by_stratum)
    weights = [STRATUM_WEIGHTS.get(n, 1.0) for n in names]
    rows = []
    for _ in range(batch_size):
        task = rng.choice(by_stratum[rng.choices(names, weights)[0]])
        prompt = tokenizer(task.prompt).input_ids
        answer = tokenizer(f"{task.answer}\n", add_special_tokens=False).input_ids
        rows.append((prompt + answer, [-100] * len(prompt) + answer))
    width = max(len(r[0]) for r in rows)
    ids = torch.full((batch_size, width), tokenizer.pad_token_id, dtype=torch.long)  # (B, L)
    labels = torch.full((batch_size, width), -100, dtype=torch.long)  # (B, L)
    for i, (x, y) in enumerate(rows):
        ids[i, : len(x)] = torch.tensor(x)
        labels[i, : len(y)] = torch.tensor(y)
    return ids, labels


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--out", type=Path, default=ROOT / "evo" / "data" / "tiny-char")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label-smoothing", type=float, default=0.2)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--no-eval", action="store_true", help="skip the Avg@8 evaluation at the end")
    ap.add_argument("--watch", action="store_true", help="also print Avg@8 (ample recipe) every --eval-every steps")
    args = ap.parse_args(argv)

    from evo.recipe import load_recipe
    from evo.train.evaluate import evaluate
    from evo.train.policy import HFPolicy, load_policy

    ample = load_recipe(ROOT / "recipes" / "arithmetic-tiny-ample.yaml")
    # One thread: the same reduction order on every machine (and no spin-waiting on a busy one).
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    env = ArithmeticEnv()
    train_tasks = env.tasks("train")
    model, tokenizer = build_tiny_model(seed=args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tiny-char: {n_params:,} parameters; {len(train_tasks)} train tasks")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))  # warm-up, then flat
    model.train()
    start = time.time()
    for step in range(args.steps):
        ids, labels = make_batch(tokenizer, train_tasks, rng, args.batch_size)
        logits = model(input_ids=ids, attention_mask=(ids != tokenizer.pad_token_id).long()).logits  # (B, L, V)
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
            ignore_index=-100, label_smoothing=args.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if (step + 1) % args.eval_every == 0 or step == 0:
            line = f"step {step + 1:5d}  loss {loss.item():.4f}  {time.time() - start:.0f}s"
            if args.watch and step:
                ev = evaluate(HFPolicy(model, tokenizer, "tiny-char"), ample, None)
                line += f"  ample Avg@8 {ev['avg_at_k']:.3f} " + json.dumps(ev["per_stratum"])
                model.train()
            print(line, flush=True)
    save_tiny_model(model, tokenizer, args.out)
    print(f"wrote {args.out}")
    if not args.no_eval:
        for recipe_name in ("arithmetic-tiny.yaml", "arithmetic-tiny-ample.yaml"):
            recipe = load_recipe(ROOT / "recipes" / recipe_name)
            ev = evaluate(load_policy(str(args.out)), recipe, None)
            print(recipe_name, json.dumps({k: ev[k] for k in ("avg_at_k", "per_stratum", "pass_at_k")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
