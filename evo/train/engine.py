"""Training engines: one GRPO policy update per generated batch, `num_iterations` times.

`TorchEngine` (the default) runs AdamW with gradient clipping, splitting the
batch into micro-batches of `grpo.micro_batch_size` trajectories whose losses
add up exactly to the batch loss (the objective's trajectory weights are
computed over the whole batch). The first iteration records the old-policy
log-probabilities (the policy that sampled the batch) and the reference
log-probabilities; later iterations reuse them, so the ratio and the clip
become active from the second iteration on. The learning rate of each step
follows `grpo.lr_schedule` (`evo.train.schedule`; the engine is told the step).

Data parallel (`WORLD_SIZE > 1`, see `evo.train.distributed`): each rank holds
its shard of the step's groups, with weights normalised over every rank's
live groups, so the ranks' losses sum to the one-process batch loss. DDP, or
FSDP2 with `grpo.fsdp: true`, averages gradients over ranks, so each rank's
loss is multiplied by the world size (`global_loss_scale`); every update ends
with exactly one synced backward per rank (`evo.train.parallel`), and the
decision to step is taken on the whole batch, never on one rank's shard.

`DeepSpeedEngine` keeps the same loss code and swaps backward/step for a
DeepSpeed engine (ZeRO stage 0-2; DeepSpeed averages over ranks the same
way). ZeRO-2 reduces on every backward, so there all ranks make the same
number of backward calls (the shorter ones pad with zero-valued backwards).
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from evo.errors import MissingDependencyError, TrainError
from evo.recipe_spec import Grpo, RecipeSpec
from evo.train import parallel
from evo.train.distributed import SINGLE
from evo.train.forward import TrainBatch, micro_batches, response_logits
from evo.train.objective import gather_logprobs, grpo_loss, masked_row_mean, token_entropy
from evo.train.schedule import lr_at


def global_loss_scale(world: int) -> float:
    """Factor on each rank's loss so that gradients averaged over `world` ranks equal the whole batch's.

    The weights w_i = 1 / (|G*| |g*|) already divide by the groups of every
    rank (|G*| is all-reduced), so the ranks' losses *sum* to the batch loss;
    DDP, FSDP and ZeRO reduce gradients by their *mean*. (verl's `agg_loss`
    multiplies by the data-parallel size for the same reason.)
    """
    return float(world)


ADAMW_SLOTS = {"step", "exp_avg", "exp_avg_sq"}  # what AdamW keeps per parameter


def _add_gradients(model, held: list[list]) -> None:
    """Each parameter's gradient becomes the sum, in segment order, of the held sums and its own.

    One process sums each segment's micro-batches on their own and then the
    segments' sums, as a two-rank run's ranks and their all-reduce do: the same
    additions in the same order, so the two runs' gradients are equal to the bit.
    """
    if not held:
        return
    for i, p in enumerate(model.parameters()):
        parts = [g for g in (*(grads[i] for grads in held), p.grad) if g is not None]
        p.grad = sum(parts[1:], parts[0]) if parts else None


class TorchEngine:
    """AdamW + grad clipping + micro-batches + several updates per batch; DDP or FSDP2 over ranks."""

    collective_backward = False  # whether every backward call is a collective (ZeRO-2), not only the synced one

    def __init__(self, model, grpo: Grpo, *, temperature: float = 1.0, ref_model=None, ranks=SINGLE):
        self.model = model
        self.ref_model = ref_model
        self.grpo = grpo
        self.temperature = float(temperature)
        self.ranks = ranks
        self.fsdp = grpo.fsdp
        self.sync_module = self._wrap()
        self.optimizer = self._make_optimizer()
        self.set_step(0)

    def _wrap(self):
        """The module whose backward reduces gradients over ranks (the model itself in one process).

        FSDP2 in one process shards over a world of one: no memory saved, the
        same code path (what a one-GPU smoke test can exercise).
        """
        if self.fsdp:
            join_world_of_one(self.ranks)
            parallel.shard_fsdp(self.model, self.ranks)
            return self.model
        if self.ranks.world == 1:
            return self.model
        return parallel.wrap_ddp(self.model, self.ranks)

    def _make_optimizer(self):
        params = list(self.model.parameters())
        kwargs = dict(lr=self.grpo.learning_rate, weight_decay=self.grpo.weight_decay)
        try:  # the fused kernel: one pass over all parameters (4x faster than the per-tensor loop on CPU)
            return torch.optim.AdamW(params, fused=True, **kwargs)
        except (RuntimeError, ValueError):  # a device or dtype the fused kernel does not cover
            return torch.optim.AdamW(params, **kwargs)

    # -- hooks a distributed engine overrides -----------------------------------------------------
    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def _backward(self, loss: torch.Tensor, sync: bool) -> None:
        if self.fsdp:
            parallel.set_gradient_sync(self.model, sync)
        loss.backward()

    def _step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grpo.max_grad_norm)
        if hasattr(norm, "full_tensor"):  # FSDP: a DTensor total norm
            norm = norm.full_tensor()
        self.optimizer.step()
        return float(norm)

    def full_parameters(self):
        """A block in which every parameter is gathered on this rank (FSDP; a no-op otherwise)."""
        return parallel.full_parameters(self.model) if self.fsdp else nullcontext()

    # -- the learning rate ------------------------------------------------------------------------
    def set_step(self, step: int) -> None:
        """Set the learning rate of GRPO step `step` (`grpo.lr_schedule`, `grpo.warmup_steps`)."""
        lr = lr_at(step, base=self.grpo.learning_rate, steps=self.grpo.steps,
                   schedule=self.grpo.lr_schedule, warmup=self.grpo.warmup_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    # -- the update ---------------------------------------------------------------------------------
    @property
    def _uses_ref(self) -> bool:
        return self.ref_model is not None and self.grpo.kl_coef > 0

    def computes(self, weights: list[float], advantages: list[float]) -> list[bool]:
        """Which rows of a batch need a forward pass.

        Without a KL term a trajectory with advantage 0 has an exactly zero
        gradient, and a zero-weight one (filtered, masked) never enters the loss:
        neither is computed. With a reference model every row is, for its KL.
        """
        if self._uses_ref:
            return [True] * len(weights)
        return [w > 0 and a != 0 for w, a in zip(weights, advantages)]

    def _plan(self, batch: TrainBatch) -> list[int]:
        """The rows this rank computes (`computes`)."""
        flags = self.computes(batch.weights.tolist(), batch.advantages.tolist())
        return [i for i, f in enumerate(flags) if f]

    def train_step(self, batch: TrainBatch) -> dict:
        """Run `num_iterations` updates on `batch` (this rank's shard); returns scalar and per-trajectory stats."""
        n = batch.size
        iterations = self.grpo.num_iterations
        kl_coef = self.grpo.kl_coef
        use_ref = self._uses_ref
        rows = self._plan(batch)
        # One process cuts its rows as the ranks of a two-rank run cut theirs; a rank's rows are one segment already.
        segments = batch.segments if self.ranks.world == 1 and batch.segments else [0] * n
        chunks = [[rows[j] for j in c] for c in micro_batches([segments[r] for r in rows],
                                                               max(1, self.grpo.micro_batch_size))]
        # One process with the plain torch engine: every backward is plain. Otherwise real backwards accumulate
        # and one zero-valued synced backward reduces them (all-reduce, FSDP's reduce-scatter into the sharded
        # gradients the optimizer steps on, DeepSpeed's accumulation boundary), whatever the last chunk held.
        reduce_once = self.ranks.world > 1 or self.fsdp or self.collective_backward
        # Plain backwards: the micro-batches where a new segment starts and the sum so far is held apart.
        splits = set() if reduce_once else {c for c in range(1, len(chunks))
                                            if segments[chunks[c][0]] != segments[chunks[c - 1][0]]}
        scale = global_loss_scale(self.ranks.world)
        learns = bool((batch.weights > 0).any())  # does anything enter the loss (on any rank, below)
        if reduce_once:
            learns = self.ranks.any(learns)
            if self.collective_backward:  # the same number of backward calls on every rank
                chunks += [[] for _ in range(self.ranks.all_max(len(chunks)) - len(chunks))]
        per_traj = {k: torch.zeros(n, dtype=torch.float64) for k in ("kl", "clip_frac_low", "clip_frac_high")}
        per_traj["entropy"] = torch.full((n,), float("nan"), dtype=torch.float64)  # rows not computed: unknown
        old_cache: list[torch.Tensor | None] = []
        ref_cache: list[torch.Tensor | None] = []
        losses, norms, updated = [], [], 0
        sync_s = 0.0  # seconds in the synced backwards: the reduction, and the wait for the other ranks to reach it
        self.model.train()
        for it in range(iterations):
            self._zero_grad()
            total_loss, any_grad = 0.0, False
            held: list = []  # one process: the gradient sums of the segments before this one
            with self.full_parameters():
                for c, chunk in enumerate(chunks):
                    if c in splits:
                        held.append([p.grad for p in self.model.parameters()])
                        self._zero_grad()
                    if not chunk:  # padding up to another rank's number of micro-batches
                        if it == 0:
                            old_cache.append(None)
                            ref_cache.append(None)
                        if learns:
                            self._backward(self._zero_loss(batch), sync=False)
                        continue
                    loss = self._chunk_loss(batch, chunk, c, it, iterations, kl_coef, use_ref, old_cache,
                                            ref_cache, per_traj)
                    if loss.requires_grad:
                        self._backward(loss * scale if reduce_once else loss, sync=False)
                        any_grad = True
                    elif reduce_once and self.collective_backward and learns:
                        self._backward(self._zero_loss(batch), sync=False)
                    total_loss += float(loss.detach())
                if reduce_once and learns:  # the one backward that reduces this update's gradients
                    t0 = time.perf_counter()
                    self._backward(self._zero_loss(batch), sync=True)
                    sync_s += time.perf_counter() - t0
                    any_grad = True
            losses.append(total_loss)
            _add_gradients(self.model, held)
            if not any_grad and learns:
                # Trajectories enter the loss but all with an exactly zero gradient (dead groups, no KL):
                # the optimizer still steps, as it would after computing them (momentum, weight decay).
                for p in self.model.parameters():
                    if p.requires_grad:
                        p.grad = torch.zeros_like(p)
                any_grad = True
            if any_grad:  # an all-filtered batch never reaches the optimizer: no parameter moves
                norms.append(self._step())
                updated += 1
        if reduce_once:  # each rank's loss is its share of the batch loss
            losses = self.ranks.all_sum(losses)
        return {
            "loss": sum(losses) / len(losses),
            "grad_norm": norms[-1] if norms else 0.0,
            "lr": self.lr,
            "updates": updated,
            "rows_computed": len(rows),
            "sync_s": sync_s,
            "per_traj": {k: v.tolist() for k, v in per_traj.items()},
        }

    def _chunk_loss(self, batch, chunk, c, it, iterations, kl_coef, use_ref, old_cache, ref_cache, per_traj):
        """The loss of one micro-batch; fills the caches (first iteration) and the per-trajectory stats."""
        idx = torch.tensor(chunk)  # (n,)
        weights = batch.weights[idx]  # (n,)
        needs_grad = bool((weights > 0).any())
        with torch.set_grad_enabled(needs_grad):
            logits, targets, mask = response_logits(self.model, batch, chunk, self.temperature)  # (n, R, V)
            logp = gather_logprobs(logits, targets)  # (n, R)
        if it == 0:
            with torch.no_grad():
                old_cache.append(logp.detach())
                per_traj["entropy"][idx] = masked_row_mean(token_entropy(logits.detach()), mask).double()
                ref = None
                if use_ref:
                    ref_logits, _, _ = response_logits(self.ref_model, batch, chunk, self.temperature)
                    ref = gather_logprobs(ref_logits, targets)  # (n, R)
                ref_cache.append(ref)
        loss, stats = grpo_loss(
            logp, old_cache[c], batch.advantages[idx], mask, weights,
            ref_logp=ref_cache[c], eps_low=self.grpo.eps_low, eps_high=self.grpo.eps_high,
            kl_coef=kl_coef,
        )
        if it == 0:
            per_traj["kl"][idx] = stats["kl"].double()
        per_traj["clip_frac_low"][idx] += stats["clip_frac_low"].double() / iterations
        per_traj["clip_frac_high"][idx] += stats["clip_frac_high"].double() / iterations
        return loss

    def _zero_loss(self, batch: TrainBatch) -> torch.Tensor:
        return parallel.zero_loss(self.sync_module, batch.pad_id, next(self.model.parameters()).device)

    # -- state: weights for a checkpoint or vLLM, optimizer for resuming --------------------------------
    def model_state(self, *, cpu: bool = True) -> dict | None:
        """The full weights when the model's own state dict does not hold them (FSDP shards; a collective)."""
        return parallel.full_model_state(self.model, cpu=cpu) if self.fsdp else None

    def weights(self) -> dict:
        """Full named weights on the model's device, for the rollout engine (a collective under FSDP)."""
        return self.model_state(cpu=False) or self.model.state_dict()

    def optimizer_state(self) -> dict | None:
        """The optimizer's state keyed by parameter position (a collective under FSDP); None: saved natively."""
        if self.fsdp:
            return parallel.full_optimizer_state(self.model, self.optimizer)
        return self.optimizer.state_dict()

    def load_optimizer_state(self, state: dict) -> None:
        if self.fsdp:
            parallel.load_full_optimizer_state(self.model, self.optimizer, state)
        else:
            self.optimizer.load_state_dict(state)

    def adopt_moments(self, state: dict) -> str | None:
        """Continue another run's AdamW state (its moments and step counts) under this run's own hyperparameters.

        `state` is a position-keyed optimizer state (`optimizer_state` of the
        run that wrote a checkpoint). Learning rate, betas and weight decay stay
        this recipe's: only the per-parameter slots carry over. Returns None when
        adopted, else why not (the optimizer then stays fresh).
        """
        flat = [p for group in self.optimizer.param_groups for p in group["params"]]
        groups = state.get("param_groups") or []
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in self.optimizer.param_groups]:
            return "its optimizer holds other parameter groups"
        if not state.get("state"):
            return "its optimizer never stepped"
        for position, slots in state["state"].items():
            i = int(position)
            if i >= len(flat) or not ADAMW_SLOTS <= set(slots) or any(
                    torch.is_tensor(v) and v.dim() and tuple(v.shape) != tuple(flat[i].shape) for v in slots.values()):
                return f"its optimizer state does not fit this model (parameter {i})"
        own = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
        self.load_optimizer_state({"state": state["state"],
                                   "param_groups": [{**mine, "params": list(theirs["params"])}
                                                    for mine, theirs in zip(own, groups)]})
        return None

    def save_native(self, folder) -> None:
        """State only the engine itself can write (DeepSpeed's ZeRO partitions); nothing for torch."""

    def load_native(self, folder) -> None:
        """Counterpart of `save_native`."""


class DeepSpeedEngine(TorchEngine):
    """Same update through a DeepSpeed engine (ZeRO 0-2, data-parallel under `deepspeed`/`torchrun`).

    Needs `deepspeed` (the `gpu` extra). The recipe's `grpo.deepspeed` mapping
    overrides the generated config. Its optimizer state is DeepSpeed's own
    (partitioned over ranks): checkpoints hold it in `deepspeed/`, written by
    every rank with `save_checkpoint`, and resume at the same world size.
    """

    collective_backward = True

    def _wrap(self):
        if self.grpo.fsdp:
            raise TrainError("recipe.yaml: grpo.fsdp: true applies to grpo.engine: torch; DeepSpeed shards with "
                             "its ZeRO stage (grpo.deepspeed.zero_optimization.stage), so drop grpo.fsdp")
        return self.model

    def _make_optimizer(self):
        try:
            import deepspeed
        except ImportError:
            raise MissingDependencyError("deepspeed", "gpu", "grpo.engine: deepspeed") from None
        config = {
            "train_micro_batch_size_per_gpu": self.grpo.micro_batch_size,
            "gradient_accumulation_steps": 1,
            "gradient_clipping": self.grpo.max_grad_norm,
            "optimizer": {"type": "AdamW", "params": {"lr": self.grpo.learning_rate,
                                                       "weight_decay": self.grpo.weight_decay}},
            "bf16": {"enabled": next(self.model.parameters()).dtype == torch.bfloat16},
            "zero_optimization": {"stage": 2},
        }
        config = _merged(config, dict(self.grpo.deepspeed or {}))
        stage = int((config.get("zero_optimization") or {}).get("stage", 0))
        if stage > 2:
            raise TrainError(f"recipe.yaml: grpo.deepspeed.zero_optimization.stage: {stage} is not supported: ZeRO-3 "
                             "gathers parameters inside every forward, and GRPO ranks run different numbers of "
                             "forwards; use stage 2 (or grpo.engine: torch with grpo.fsdp: true)")
        config["train_batch_size"] = config["train_micro_batch_size_per_gpu"] * self.ranks.world
        join_world_of_one(self.ranks)  # one process: a world of one, not DeepSpeed's MPI discovery
        os.environ.setdefault("LOCAL_RANK", str(self.ranks.local_rank))  # DeepSpeed asserts a launcher set it
        self.ds_engine, optimizer, _, _ = deepspeed.initialize(model=self.model, config=config,
                                                               model_parameters=self.model.parameters())
        return optimizer

    def computes(self, weights: list[float], advantages: list[float]) -> list[bool]:
        # Every trajectory in the loss goes through backward, so DeepSpeed's own step logic always runs.
        return [self._uses_ref or w > 0 for w in weights]

    def _zero_grad(self) -> None:
        self.ds_engine.zero_grad()

    def _backward(self, loss: torch.Tensor, sync: bool) -> None:
        # Micro-batch losses are already weighted to sum to the batch loss: no GAS rescaling.
        self.ds_engine.set_gradient_accumulation_boundary(sync)
        self.ds_engine.backward(loss, scale_wrt_gas=False)

    def _step(self) -> float:
        self.ds_engine.step()
        norm = self.ds_engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    def optimizer_state(self) -> dict | None:
        return None

    def adopt_moments(self, state: dict) -> str | None:
        return "DeepSpeed keeps its optimizer in its own partitions"

    def save_native(self, folder) -> None:
        self.ds_engine.save_checkpoint(str(Path(folder) / "deepspeed"), tag="state", save_latest=False)

    def load_native(self, folder) -> None:
        self.ds_engine.load_checkpoint(str(Path(folder) / "deepspeed"), tag="state", load_module_strict=True,
                                       load_optimizer_states=True, load_lr_scheduler_states=False)


def join_world_of_one(ranks) -> bool:
    """A one-process group for engines that need one (FSDP2, DeepSpeed) when no launcher made one; True if made."""
    if ranks.world > 1 or torch.distributed.is_initialized():
        return False
    from evo.train.launch import free_port

    backend = "nccl" if ranks.device.type == "cuda" else "gloo"
    torch.distributed.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    return True


def _merged(base: dict, override: dict) -> dict:
    """`base` with `override` merged in, mapping by mapping (grpo.deepspeed sets only the keys it names)."""
    out = dict(base)
    for key, value in override.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def make_engine(spec: RecipeSpec, model, *, ref_model=None, ranks=SINGLE) -> TorchEngine:
    """The engine named by `grpo.engine` (torch | deepspeed)."""
    name = spec.grpo.engine
    cls = {"torch": TorchEngine, "deepspeed": DeepSpeedEngine}.get(name)
    if cls is None:
        raise TrainError(f"recipe.yaml: grpo.engine: {name!r} is not an engine; use torch or deepspeed")
    return cls(model, spec.grpo, temperature=spec.rollout.temperature, ref_model=ref_model,
               ranks=ranks)
