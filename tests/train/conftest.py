"""Fixtures: a throwaway tiny HF model on disk, and small recipes."""

import pytest

from evo.recipe import normalize_recipe, set_path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A randomly initialised char-level Llama saved with save_pretrained (loads by path, no download)."""
    from evo.train.tiny import build_tiny_model, save_tiny_model

    model, tok = build_tiny_model(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, seed=1)
    return save_tiny_model(model, tok, tmp_path_factory.mktemp("tiny-random"))


def small_recipe(**overrides) -> dict:
    """The embedded default scaled down to a few seconds of CPU."""
    data = {
        "name": "test-small",
        "seed": 3,
        "domain": {"name": "arithmetic", "options": {"n_validation": 12, "n_train": 60}},
        "model": {"name": "builtin:tiny-char"},
        "rollout": {"prompts_per_step": 4, "num_generations": 4, "max_new_tokens": 6},
        "grpo": {"steps": 3, "learning_rate": 0.002, "micro_batch_size": 8},
        "reward": {"terms": [{"name": "correctness"}, {"name": "partial_credit", "weight": 0.5}]},
        "eval": {"k": 2, "seed": 5},
    }
    for dotted, value in overrides.items():
        data = set_path(data, dotted, value)
    return normalize_recipe(data)
