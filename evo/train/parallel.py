"""Data-parallel wrappers for the torch engine: DDP, or FSDP2 (`grpo.fsdp: true`), and their state dicts.

Ranks of a GRPO step do different amounts of work: each samples its own groups
(generation stops when its rows finish), skips the rows whose gradient is
exactly zero, and splits the rest into its own micro-batches and length
buckets. So no collective may hide in a forward pass:

- DDP (`DistributedDataParallel`, `broadcast_buffers=False`): real micro-batches
  run on the plain module, whose backward only accumulates gradients (DDP's
  hooks are idle unless a forward went through the wrapper); each update then
  ends with one zero-valued backward through the wrapper, which all-reduces
  the accumulated gradients. Every rank makes exactly that one synced backward.
  The wrapper holds `ZeroReach`, not the model: its forward reaches every
  parameter without running the model.
- FSDP2 (`torch.distributed.fsdp.fully_shard`, per decoder layer and the root):
  parameters are gathered once for the work of an update or a rollout
  (`full_parameters`: unshard, no reshard after forward or backward) and
  resharded before the optimizer steps, which then updates sharded parameters
  with sharded AdamW state. Gradients accumulate unreduced and are
  reduce-scattered by the same single zero-valued synced backward. The model
  must fit on one device while gathered; FSDP2 here saves the memory of
  gradients and optimizer state (3x the parameters in fp32 AdamW).

Both average gradients over ranks; the engine multiplies each rank's loss by
the world size because the loss is already normalised over the whole batch
(`evo.train.objective.trajectory_weights(live_groups=...)`).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch


class ZeroReach(torch.nn.Module):
    """What DDP wraps: a forward that is a loss of exactly 0 reaching every trainable parameter, without the model.

    Real micro-batches run on the plain model, so DDP's only forward is the
    synced backward's. Through the model that costs a one-token forward and
    backward (7 ms for the tiny default on one CPU thread, more for a real
    model); here it is one element of each parameter. Its gradient is exactly
    zero even where a parameter is inf or NaN.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self) -> torch.Tensor:
        firsts = [p.reshape(-1)[0].float() for p in self.model.parameters() if p.requires_grad]
        return torch.stack(firsts).sum() * 0.0  # ()


def wrap_ddp(model, ranks):
    from torch.nn.parallel import DistributedDataParallel

    ids = [ranks.device.index] if ranks.device.type == "cuda" else None
    return DistributedDataParallel(ZeroReach(model), device_ids=ids, broadcast_buffers=False)


def shard_fsdp(model, ranks) -> None:
    """fully_shard each decoder layer (the model's `_no_split_modules` classes), then the root, in place."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ranks.device.type, (ranks.world,))
    layer_classes = set(getattr(model, "_no_split_modules", None) or ())
    for module in list(model.modules()):
        if type(module).__name__ in layer_classes:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)


def fsdp_modules(model) -> list:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextmanager
def full_parameters(model):
    """Every FSDP parameter gathered (and kept) for the block; resharded at its end."""
    modules = fsdp_modules(model)
    for m in modules:
        m.set_reshard_after_forward(False, recurse=False)
        m.set_reshard_after_backward(False, recurse=False)
    for m in modules:
        m.unshard()
    try:
        yield
    finally:
        for m in modules:
            m.reshard()
            m.set_reshard_after_forward(True, recurse=False)
            m.set_reshard_after_backward(True, recurse=False)


def set_gradient_sync(model, sync: bool) -> None:
    model.set_requires_gradient_sync(sync)


def full_model_state(model, *, cpu: bool) -> dict:
    """The unsharded state dict of an FSDP model (a collective): on rank 0 only with `cpu`, else on every rank."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=cpu))
    # Gathered tied weights are separate tensors: keep each under its first name only, as save_pretrained does.
    unique = {name for name, _ in model.named_parameters()}
    tied = {name for name, _ in model.named_parameters(remove_duplicate=False)} - unique
    return {k: v for k, v in state.items() if k not in tied}


def _param_index(model) -> dict[str, int]:
    """Every name of every parameter (tied ones have several) -> its position in `model.parameters()`."""
    position = {id(p): i for i, p in enumerate(model.parameters())}
    return {name: position[id(p)] for name, p in model.named_parameters(remove_duplicate=False)}


def full_optimizer_state(model, optimizer) -> dict:
    """The unsharded AdamW state keyed by parameter position, as a one-process optimizer's state_dict.

    A collective; the state lands on rank 0 (the other ranks get {}).
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    state = get_optimizer_state_dict(model, optimizer,
                                     options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not state:
        return {}
    index = _param_index(model)
    groups = [{**g, "params": sorted({index[name] for name in g["params"]})} for g in state["param_groups"]]
    return {"state": {index[name]: slots for name, slots in state["state"].items()}, "param_groups": groups}


def load_full_optimizer_state(model, optimizer, state: dict) -> None:
    """Load a position-keyed full optimizer state (from `full_optimizer_state` or one process) into FSDP shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    name_of = {}
    for name, i in _param_index(model).items():
        name_of.setdefault(i, name)
    by_name = {
        "state": {name_of[int(i)]: slots for i, slots in state["state"].items()},
        "param_groups": [{**g, "params": [name_of[int(i)] for i in g["params"]]} for g in state["param_groups"]],
    }
    set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))


def zero_loss(module, pad_id: int, device) -> torch.Tensor:
    """A loss of exactly 0 whose backward reaches every parameter: the synced backward of an update."""
    if isinstance(getattr(module, "module", None), ZeroReach):  # DDP
        return module()
    out = module(input_ids=torch.tensor([[int(pad_id)]], device=device), use_cache=False)
    return out.logits.float().sum() * 0.0  # ()
