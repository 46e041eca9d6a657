"""Property: a valid recipe perturbed into an invalid one never produces a traceback.

Random valid recipes are drawn from the recipe schema itself (every typed leaf
set to a random value inside its bounds), then perturbed: a type swap, NaN or
infinity, a value outside its bounds, an unknown key, a duplicated key. Many go
through the library (`parse_recipe`, what every command calls); a few through
the real `evo validate`, `evo train` and `evo step --dry-run` in a subprocess.
A perturbation that must make the recipe invalid (all but some type swaps) must
be refused with one ConfigError line naming the file.
"""

from __future__ import annotations

import math
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

from evo.errors import ConfigError
from evo.recipe import parse_recipe
from evo.resources import resource_dir
from evo.schemas import load_schema
from evo.yamlio import dump_yaml, parse_yaml

EVO = str(Path(sys.executable).with_name("evo"))
FREE_FORM = {"domain.options", "rollout.vllm", "grpo.deepspeed"}  # objects of any keys
FIXED = {"domain.name", "model.name", "reward.terms", "filters.anomaly.rules", "rollout.stop"}  # kept from the base recipe


def leaves(schema: dict, prefix: str = "") -> list[tuple[str, dict]]:
    """(dotted path, schema) of every typed scalar the recipe schema declares."""
    out = []
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        if path in FREE_FORM or path in FIXED:
            continue
        if sub.get("type") == "object" and "properties" in sub:
            out += leaves(sub, path + ".")
        else:
            out.append((path, sub))
    return out


def objects(schema: dict, prefix: str = "") -> list[str]:
    """Dotted paths of the closed mappings (additionalProperties: false); '' is the top level."""
    out = [prefix.rstrip(".")] if schema.get("additionalProperties") is False else []
    for key, sub in schema.get("properties", {}).items():
        if sub.get("type") == "object" and "properties" in sub and f"{prefix}{key}" not in FREE_FORM:
            out += objects(sub, f"{prefix}{key}.")
    return out


SCHEMA = load_schema("recipe")
LEAVES = leaves(SCHEMA)
OBJECTS = objects(SCHEMA)


def valid_value(rng: random.Random, sub: dict):
    types = sub.get("type") if isinstance(sub.get("type"), list) else [sub.get("type")]
    if "enum" in sub:
        return rng.choice(sub["enum"])
    if "boolean" in types:
        return rng.random() < 0.5
    if "integer" in types:
        low = sub.get("minimum", 0)
        return rng.randint(low, min(sub.get("maximum", low + 40), low + 40))
    if "number" in types:
        low = sub.get("minimum", sub.get("exclusiveMinimum", 0))
        high = min(sub.get("maximum", low + 2.0), low + 2.0)
        return round(rng.uniform(low, high), 6) or high
    return rng.choice(["a", "validation", "x-1"])


def set_path(data: dict, path: str, value) -> None:
    node = data
    *parents, last = path.split(".") if path else [""]
    for part in parents:
        node = node.setdefault(part, {})
    if last:
        node[last] = value


def fill_required(data: dict, schema: dict, rng: random.Random) -> None:
    """A mapping the sampler created (e.g. reward.model_judge) gets the keys its schema requires."""
    for key in schema.get("required", []):
        if key not in data and key in schema.get("properties", {}):
            data[key] = valid_value(rng, schema["properties"][key])
    for key, sub in schema.get("properties", {}).items():
        if isinstance(data.get(key), dict) and sub.get("type") == "object":
            fill_required(data[key], sub, rng)


def random_valid(rng: random.Random) -> dict:
    base = rng.choice(sorted(resource_dir("recipes").glob("*-tiny.yaml")))
    data = parse_yaml(base.read_text(), source=base.name)
    for path, sub in rng.sample(LEAVES, k=rng.randint(3, 12)):
        set_path(data, path, valid_value(rng, sub))
    fill_required(data, SCHEMA, rng)
    grpo = data.setdefault("grpo", {})
    if grpo.get("eps_high", 0.27) < grpo.get("eps_low", 0.2):
        grpo["eps_high"] = grpo.get("eps_low", 0.2)
    return data


def perturb(rng: random.Random, data: dict) -> tuple[str, str, bool]:
    """(kind, YAML text, must_be_refused)."""
    kind = rng.choice(["type", "non-finite", "range", "unknown-key", "duplicate-key"])
    if kind == "duplicate-key":
        text = dump_yaml(data)
        lines = text.splitlines(keepends=True)
        keyed = [i for i, ln in enumerate(lines) if re.match(r"^\s*[a-z_]+: \S", ln)]
        i = rng.choice(keyed)
        return kind, "".join(lines[: i + 1] + [lines[i]] + lines[i + 1:]), True
    if kind == "unknown-key":
        set_path(data, ".".join(p for p in (rng.choice(OBJECTS), "bogus_setting") if p), 1)
        return kind, dump_yaml(data), True
    numeric = [(p, s) for p, s in LEAVES if {"integer", "number"} & set(s["type"] if isinstance(s.get("type"), list)
                                                                        else [s.get("type")])]
    if kind == "non-finite":
        path, _ = rng.choice(numeric)
        set_path(data, path, rng.choice([math.nan, math.inf, -math.inf]))
        return kind, dump_yaml(data), True
    if kind == "range":
        bounded = [(p, s) for p, s in numeric if "maximum" in s or "minimum" in s or "exclusiveMinimum" in s]
        path, sub = rng.choice(bounded)
        if "maximum" in sub and (rng.random() < 0.5 or not ({"minimum", "exclusiveMinimum"} & set(sub))):
            value = sub["maximum"] * 10 + 1
        else:
            value = sub.get("minimum", sub.get("exclusiveMinimum", 0)) - 1
        set_path(data, path, int(value) if "integer" in str(sub.get("type")) else float(value))
        return kind, dump_yaml(data), True
    path, _ = rng.choice(LEAVES)
    set_path(data, path, rng.choice(["text", 7, 2.5, True, None, [1, 2], {"k": 1}]))
    return kind, dump_yaml(data), False


def cases(n: int, seed: int = 11):
    rng = random.Random(seed)
    for _ in range(n):
        yield perturb(rng, random_valid(rng))


def test_random_valid_recipes_are_valid():
    rng = random.Random(3)
    for _ in range(100):
        parse_recipe(dump_yaml(random_valid(rng)), source="random.yaml")


def test_perturbed_recipes_are_refused_in_one_line_never_a_traceback():
    seen: dict[str, int] = {}
    for kind, text, must_refuse in cases(600):
        seen[kind] = seen.get(kind, 0) + 1
        try:
            parse_recipe(text, source="perturbed.yaml")
        except ConfigError as exc:
            message = str(exc)
            assert message.startswith("perturbed.yaml:") and "\n" not in message, (kind, message)
            continue
        assert not must_refuse, (kind, text)
    assert set(seen) == {"type", "non-finite", "range", "unknown-key", "duplicate-key"}


def refused(n: int, seed: int) -> list[str]:
    """The first `n` perturbed recipes the library refuses (so no command below trains)."""
    out = []
    for _kind, text, _ in cases(200, seed=seed):
        try:
            parse_recipe(text, source="x")
        except ConfigError:
            out.append(text)
        if len(out) == n:
            return out
    raise AssertionError("too few refused cases")


def run_evo(*args, cwd):
    return subprocess.run([EVO, *map(str, args)], cwd=cwd, capture_output=True, text=True, env=os.environ.copy())


def assert_one_line(proc) -> None:
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("Error: "), proc.stderr


def test_evo_validate_train_and_dry_run_refuse_perturbed_recipes_in_one_line(ws, tmp_path, h):
    texts = refused(7, seed=5)
    for text in texts[:3]:
        (tmp_path / "perturbed.yaml").write_text(text)
        assert_one_line(run_evo("train", "perturbed.yaml", "--out", tmp_path / "run", cwd=tmp_path))
    assert not (tmp_path / "run").exists()
    for text in texts[3:5]:
        (ws / "recipe.yaml").write_text(text)
        assert_one_line(run_evo("validate", cwd=ws))
    h.git(ws, "checkout", "-q", "--", "recipe.yaml")
    for i, text in enumerate(texts[5:7]):
        # The recipe a dry run reads: the promoted head's, on its branch (and main's, as a user commit).
        copy = tmp_path / f"ws{i}"
        shutil.copytree(ws, copy, symlinks=True)
        scratch = tmp_path / f"scratch{i}"
        h.git(copy, "worktree", "add", "-q", str(scratch), "evo/v0")
        (scratch / "recipe.yaml").write_text(text)
        h.git(scratch, "commit", "-qam", "a broken recipe on v0")
        h.git(copy, "worktree", "remove", "--force", str(scratch))
        (copy / "recipe.yaml").write_text(text)
        h.git(copy, "commit", "-qam", "a broken recipe on main")
        before = h.snapshot(copy)
        assert_one_line(run_evo("step", "--dry-run", cwd=copy))
        assert h.snapshot(copy) == before
