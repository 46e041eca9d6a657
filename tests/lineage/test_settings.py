"""Settings a user writes in evo.yaml: what the loop reads is what the schema accepts."""

from __future__ import annotations

import pytest

from evo.errors import ConfigError
from evo.harness.compare import HEADLINE
from evo.settings import normalize_settings

BASE = {"domain": "arithmetic", "model": "builtin:tiny-char"}


def test_the_headline_is_the_metric_the_judge_computes_and_nothing_else_is_accepted():
    assert normalize_settings(BASE)["search"]["headline"] == HEADLINE
    with pytest.raises(ConfigError) as err:
        normalize_settings({**BASE, "search": {"headline": "score/pass_at_k"}})
    assert "search.headline" in str(err.value) and "score/pass_at_k" in str(err.value)


def test_the_loop_reads_typed_frozen_settings_whose_defaults_are_the_schemas():
    import dataclasses

    from evo.schemas import load_schema
    from evo.settings import LoopSettings

    schema = load_schema("settings")["properties"]
    config = LoopSettings.of(normalize_settings({**BASE, "gate": {"approval_above_gpu_hours": 0.5}}))
    assert config.gate.approval_above_gpu_hours == 0.5
    for section in ("search", "gate", "budget", "run"):
        for field in dataclasses.fields(getattr(config, section)):
            if field.name != "approval_above_gpu_hours":
                assert getattr(getattr(config, section), field.name) == schema[section]["properties"][field.name]["default"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.search.control = "none"
    with pytest.raises(KeyError):  # a mapping that skipped validation has no defaults to guess from
        LoopSettings.of({"search": {}, "gate": {}, "budget": {}, "run": {}})
