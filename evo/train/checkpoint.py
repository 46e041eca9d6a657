"""Resumable checkpoints: `save_pretrained` weights + optimizer, step and RNG state.

Layout (docs/contracts.md): `checkpoint/` holds config.json, model.safetensors,
tokenizer files, `trainer_state.safetensors` (optimizer tensors, torch RNG) and
`trainer_state.json` (step, recipe hash, init checkpoint, finished flag, the
optimizer's non-tensor state, the world size). A checkpoint is written to a
side folder and swapped in by rename, so an interrupt while saving never leaves
a half-written `checkpoint/`: the previous one survives.

In a data-parallel run every rank calls `save_checkpoint` (gathering FSDP
shards is a collective) and rank 0 alone writes, except DeepSpeed's ZeRO
optimizer partitions, which each rank writes into `deepspeed/` with
DeepSpeed's own `save_checkpoint`; those resume only at the same world size.
Torch-engine checkpoints hold the full optimizer state and resume at any
world size.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from evo.errors import TrainError

STATE_JSON = "trainer_state.json"
STATE_TENSORS = "trainer_state.safetensors"


def _flatten_optimizer(state: dict) -> tuple[dict, dict]:
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict] = {}
    for idx, slots in state["state"].items():
        for name, value in slots.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{idx}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(idx), {})[name] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: dict, meta: dict) -> dict:
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = value
    for idx, slots in meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(slots)
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(folder: str | Path, policy, engine, info: dict) -> Path:
    """Write a complete checkpoint of `policy` + `engine` with `info` (step, recipe_hash, ...); call on every rank."""
    from safetensors.torch import save_file

    ranks = engine.ranks
    folder = Path(folder)
    partial = folder.with_name(folder.name + ".partial")
    old = folder.with_name(folder.name + ".old")
    if ranks.main:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
    ranks.barrier()
    weights = engine.model_state()  # collectives first, on every rank
    optimizer = engine.optimizer_state()
    if ranks.main:
        policy.save(partial, state_dict=weights)
        tensors, opt_meta = _flatten_optimizer(optimizer) if optimizer is not None else ({}, None)
        tensors["rng.torch"] = torch.get_rng_state()
        save_file(tensors, str(partial / STATE_TENSORS))
        state = {**info, "world_size": ranks.world, "optimizer": opt_meta}
        (partial / STATE_JSON).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    engine.save_native(partial)
    ranks.barrier()
    if ranks.main:
        if folder.exists():
            shutil.rmtree(old, ignore_errors=True)
            folder.rename(old)
        partial.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    ranks.barrier()
    return folder


def find_checkpoint(folder: str | Path) -> Path | None:
    """The newest complete checkpoint at `folder` (or its `.old` twin after an interrupted swap)."""
    folder = Path(folder)
    for candidate in (folder, folder.with_name(folder.name + ".old")):
        if (candidate / STATE_JSON).exists() and (candidate / STATE_TENSORS).exists():
            return candidate
    return None


def read_state(folder: str | Path) -> dict:
    path = Path(folder) / STATE_JSON
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TrainError(f"{path}: unreadable trainer state ({exc}); delete the run folder to start over") from None


def restore_engine(folder: str | Path, engine) -> dict:
    """Load optimizer and RNG state into `engine` (on every rank); returns the trainer_state.json dict."""
    from safetensors.torch import load_file

    folder = Path(folder)
    info = read_state(folder)
    tensors = load_file(str(folder / STATE_TENSORS))
    if info.get("optimizer") is not None:
        engine.load_optimizer_state(_unflatten_optimizer(tensors, info["optimizer"]))
    else:  # DeepSpeed's partitions, one per rank of the world that wrote them
        written = int(info.get("world_size", 1))
        if written != engine.ranks.world:
            raise TrainError(f"{folder}: DeepSpeed checkpoint written by {written} ranks cannot resume on "
                             f"{engine.ranks.world}; rerun with --nproc {written}, or delete the run folder to start over")
        engine.load_native(folder)
    if "rng.torch" in tensors:
        torch.set_rng_state(tensors["rng.torch"])
    return info


def adopt_optimizer(folder: str | Path, engine) -> str | None:
    """Start `engine` with the AdamW moments of the run that wrote checkpoint `folder` (on every rank).

    A version trains on from its parent's checkpoint; a fresh optimizer there
    would take its first steps with no second-moment estimate (each update about
    lr times the gradient's sign), a lurch a run continuing on its own never
    takes. Weights, schedule offset and the recipe's hyperparameters are the
    caller's; only the per-parameter optimizer slots come from `folder`.
    Returns None when adopted, else why the optimizer starts fresh.
    """
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / STATE_JSON).is_file() or not (folder / STATE_TENSORS).is_file():
        return "the checkpoint holds weights only"
    try:
        info = read_state(folder)
        tensors = load_file(str(folder / STATE_TENSORS))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error type
        raise TrainError(f"{folder}: the checkpoint to start from has an unreadable optimizer state "
                         f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); it is evidence of "
                         "another run: check it with `evo fsck`, or start from a weights-only copy") from None
    if info.get("optimizer") is None:
        return "the checkpoint's optimizer state is in DeepSpeed partitions"
    return engine.adopt_moments(_unflatten_optimizer(tensors, info["optimizer"]))
