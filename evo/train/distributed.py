"""Where this process stands in a data-parallel run, and the few collectives training needs.

A run is data-parallel when it is launched with `WORLD_SIZE > 1` (by
`evo.train.launch`, or by an outside `torchrun` / `deepspeed`). Every rank
then loads the same policy, samples its shard of each step's prompts (whole
groups, never part of one), and joins the others only where the math needs
all of them: the number of live groups that normalises the loss, the gradient
reduction inside the engine, and the records and metrics that rank 0 alone
writes. With one process every collective here is the identity, so the
single-process path does no communication at all.

Scalars and Python objects travel over a CPU (gloo) group even when the
gradients use NCCL, so no collective here needs a device tensor.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NoReturn, Sequence

import torch


@dataclass(frozen=True)
class Ranks:
    """This process's rank, the world size, and its device; collectives that degrade to no-ops at world 1."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    group: Any = None  # the CPU group for scalars and objects (None: the default group)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def shard(self, count: int) -> list[int]:
        """The indices of `count` items this rank owns: every world-th one, from its rank (strided)."""
        return list(range(self.rank, count, self.world))

    def all_sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over ranks (float64)."""
        if self.world == 1:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64)  # (n,)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM, group=self.group)
        return t.tolist()

    def all_max(self, value: int) -> int:
        if self.world == 1:
            return int(value)
        t = torch.tensor([int(value)], dtype=torch.int64)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX, group=self.group)
        return int(t.item())

    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on one (e.g. a stop request seen by one rank)."""
        return bool(self.all_max(int(bool(flag))))

    def gather(self, obj) -> list | None:
        """Every rank's `obj` on rank 0, in rank order; None on the other ranks."""
        if self.world == 1:
            return [obj]
        out = [None] * self.world if self.main else None
        torch.distributed.gather_object(obj, out, dst=0, group=self.group)
        return out

    def all_gather(self, obj) -> list:
        """Every rank's `obj` on every rank, in rank order."""
        if self.world == 1:
            return [obj]
        out = [None] * self.world
        torch.distributed.all_gather_object(out, obj, group=self.group)
        return out

    def exchange(self, outgoing: Sequence[list]) -> list[list]:
        """`outgoing[r]` goes to rank r; returns what each rank sent here, in rank order.

        One all-gather: every rank receives all of it and keeps its part, which
        suits the few moved groups of `evo.train.balance`, not bulk traffic.
        """
        return [parts[self.rank] for parts in self.all_gather(list(outgoing))]

    def broadcast(self, obj):
        """Rank 0's `obj` on every rank."""
        if self.world == 1:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier(group=self.group)


SINGLE = Ranks()


def _device(local_rank: int) -> torch.device:
    return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")


def launched_world() -> int:
    """The world size a launcher gave this process (1 when it was not launched as a rank)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


_CURRENT: Ranks | None = None


def current() -> Ranks:
    """This process's ranks: joins the process group on first use when launched with WORLD_SIZE > 1."""
    global _CURRENT
    if _CURRENT is None:
        _CURRENT = _join() if launched_world() > 1 else Ranks(device=_device(0))
    return _CURRENT


def _join() -> Ranks:
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = _device(local_rank)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        # A rank that dies leaves the others waiting in a collective; the launcher kills them long before this.
        dist.init_process_group(backend=backend, timeout=timedelta(minutes=30))
    group = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else None
    return Ranks(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local_rank, device=device, group=group)


def joined() -> bool:
    """Whether this process joined a process group as one of several ranks."""
    return _CURRENT is not None and _CURRENT.world > 1


def end_rank(code: int) -> NoReturn:
    """End this process as a rank of a launched run, with exit status `code`.

    A rank that succeeded first waits for the others (a barrier), so none
    exits while a peer still talks to it. Then the process ends at once
    (`os._exit`), without destroying the process group or finalizing the
    interpreter: gloo's worker threads release their last work objects
    lazily, and one that does so while Python finalizes needs the GIL, is
    ended by the interpreter and aborts the process ("terminate called
    without an active exception", SIGABRT) after the run's work is done.
    That was seen here in 1 of about 75 two-rank FSDP2 runs under an outside
    torchrun even with the barrier and `destroy_process_group` (3 of 32
    without the barrier); a core dump put it in `ProcessGroupGloo::runLoop`
    freeing a broadcast's tensors. The launcher still counts a run whose
    ranks all reported done (`evo.train.launch._finished`).
    """
    import torch.distributed as dist

    if code == 0 and dist.is_available() and dist.is_initialized():
        try:
            dist.barrier(group=_CURRENT.group if _CURRENT else None)  # over the CPU group when NCCL holds gradients
        except Exception:  # noqa: BLE001 (a peer died first: the run failed, and the launcher names that rank)
            code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
