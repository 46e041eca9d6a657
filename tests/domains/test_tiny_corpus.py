"""The pretraining corpus of `builtin:tiny-char-mix` (scripts/tiny_corpus.py): train tasks only, real episodes, imperfect habits."""

from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from tiny_corpus import Corpus  # noqa: E402

from evo.domains import get_environment  # noqa: E402


def test_corpus_draws_train_tasks_only():
    corpus = Corpus()
    key = lambda t: (t.prompt, str(t.meta.get("lines")))  # noqa: E731  (a patch task is its issue and its file)
    for domain, tasks in corpus.tasks.items():
        held_out = {key(t) for t in get_environment(domain, {}).tasks("validation")}
        assert not held_out & {key(t) for t in tasks}, domain


def test_demonstrations_are_real_episodes_with_imperfect_habits():
    corpus, rng = Corpus(), random.Random(0)
    calc = [corpus.draw("calc", rng) for _ in range(400)]
    called = sum("\ncalc " in "".join(t for t, _ in ex) for ex in calc)
    assert 0.1 * 400 < called < 0.4 * 400  # the calculator is shown, but rarely
    patch = [corpus.draw("patch", rng) for _ in range(400)]
    for ex in patch:
        assert not ex[0][1] and all(trained != text.startswith("|") for text, trained in ex[1:])  # context vs actions
    actions = ["".join(t for t, trained in ex if trained) for ex in patch]
    premature = sum(a.startswith(("submit", "read\nsubmit")) for a in actions)
    clean = sum(a.count("read\n") == 1 and a.endswith("test\nsubmit\n") for a in actions)
    assert premature > 10 and clean > 100

