"""Training engines: one GRPO policy update per generated batch, `num_iterations` times.

`TorchEngine` (the default) runs AdamW with gradient clipping on one device,
splitting the batch into micro-batches of `grpo.micro_batch_size` trajectories
whose losses add up exactly to the batch loss (the objective's trajectory
weights are computed over the whole batch). The first iteration records the
old-policy log-probabilities (the policy that sampled the batch) and the
reference log-probabilities; later iterations reuse them, so the ratio and
the clip become active from the second iteration on.

`DeepSpeedEngine` keeps the same loss code and swaps backward/step for a
DeepSpeed engine launched under `deepspeed`/`torchrun`; it needs a GPU host
with the `gpu` extra and is not exercised by the CPU test-suite.
"""

from __future__ import annotations

import torch

from evo.errors import MissingDependencyError, TrainError
from evo.train.forward import TrainBatch, response_logits
from evo.train.objective import gather_logprobs, grpo_loss, masked_row_mean, token_entropy


class TorchEngine:
    """AdamW + grad clipping + micro-batches + several updates per batch, on one device."""

    def __init__(self, model, grpo: dict, *, temperature: float = 1.0, ref_model=None):
        self.model = model
        self.ref_model = ref_model
        self.cfg = grpo
        self.temperature = float(temperature)
        self.optimizer = self._make_optimizer()

    def _make_optimizer(self):
        params = list(self.model.parameters())
        kwargs = dict(lr=float(self.cfg["learning_rate"]), weight_decay=float(self.cfg["weight_decay"]))
        try:  # the fused kernel: one pass over all parameters (4x faster than the per-tensor loop on CPU)
            return torch.optim.AdamW(params, fused=True, **kwargs)
        except (RuntimeError, ValueError):  # a device or dtype the fused kernel does not cover
            return torch.optim.AdamW(params, **kwargs)

    # -- hooks a distributed engine overrides -----------------------------------------------------
    def _zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def _backward(self, loss: torch.Tensor, last: bool) -> None:
        loss.backward()

    def _step(self) -> float:
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(self.cfg["max_grad_norm"]))
        self.optimizer.step()
        return float(norm)

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    # -- the update ---------------------------------------------------------------------------------
    def _plan(self, batch: TrainBatch, use_ref: bool) -> list[int]:
        """Rows that need a forward pass.

        Without a KL term a trajectory with advantage 0 has an exactly zero
        gradient, and a zero-weight one (filtered, masked) never enters the loss:
        neither is computed. With a reference model every row is, for its KL.
        """
        if use_ref:
            return list(range(batch.size))
        weights, advantages = batch.weights.tolist(), batch.advantages.tolist()
        return [i for i in range(batch.size) if weights[i] > 0 and advantages[i] != 0]

    def train_step(self, batch: TrainBatch) -> dict:
        """Run `num_iterations` updates on `batch`; returns scalar and per-trajectory stats."""
        n = batch.size
        iterations = int(self.cfg["num_iterations"])
        kl_coef = float(self.cfg["kl_coef"])
        use_ref = self.ref_model is not None and kl_coef > 0
        rows = self._plan(batch, use_ref)
        mb = max(1, int(self.cfg["micro_batch_size"]))
        chunks = [rows[i: i + mb] for i in range(0, len(rows), mb)]
        per_traj = {k: torch.zeros(n, dtype=torch.float64) for k in ("kl", "clip_frac_low", "clip_frac_high")}
        per_traj["entropy"] = torch.full((n,), float("nan"), dtype=torch.float64)  # rows not computed: unknown
        old_cache: list[torch.Tensor] = []
        ref_cache: list[torch.Tensor | None] = []
        losses, norms, updated = [], [], 0
        self.model.train()
        for it in range(iterations):
            self._zero_grad()
            total_loss, any_grad = 0.0, False
            for c, chunk in enumerate(chunks):
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
                    ref_logp=ref_cache[c], eps_low=float(self.cfg["eps_low"]), eps_high=float(self.cfg["eps_high"]),
                    kl_coef=kl_coef,
                )
                if it == 0:
                    per_traj["kl"][idx] = stats["kl"].double()
                per_traj["clip_frac_low"][idx] += stats["clip_frac_low"].double() / iterations
                per_traj["clip_frac_high"][idx] += stats["clip_frac_high"].double() / iterations
                if loss.requires_grad:
                    self._backward(loss, last=c == len(chunks) - 1)
                    any_grad = True
                total_loss += float(loss.detach())
            losses.append(total_loss)
            if not any_grad and bool((batch.weights > 0).any()):
                # Trajectories enter the loss but all with an exactly zero gradient (dead groups, no KL):
                # the optimizer still steps, as it would after computing them (momentum, weight decay).
                for p in self.model.parameters():
                    if p.requires_grad:
                        p.grad = torch.zeros_like(p)
                any_grad = True
            if any_grad:  # an all-filtered batch never reaches the optimizer: no parameter moves
                norms.append(self._step())
                updated += 1
        return {
            "loss": sum(losses) / len(losses),
            "grad_norm": norms[-1] if norms else 0.0,
            "lr": self.lr,
            "updates": updated,
            "rows_computed": len(rows),
            "per_traj": {k: v.tolist() for k, v in per_traj.items()},
        }

    # -- checkpoint state -------------------------------------------------------------------------
    def optimizer_state(self) -> dict:
        return self.optimizer.state_dict()

    def load_optimizer_state(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)


class DeepSpeedEngine(TorchEngine):
    """Same update through a DeepSpeed engine (ZeRO, multi-GPU under `deepspeed`/`torchrun`).

    Needs `deepspeed` (the `gpu` extra) and CUDA; it cannot run on the CPU-only
    development machines, so the CPU test-suite does not exercise it. The recipe's
    `grpo.deepspeed` mapping overrides the generated config.
    """

    def _make_optimizer(self):
        try:
            import deepspeed
        except ImportError:
            raise MissingDependencyError("deepspeed", "gpu", "grpo.engine: deepspeed") from None
        config = {
            "train_micro_batch_size_per_gpu": int(self.cfg["micro_batch_size"]),
            "gradient_accumulation_steps": 1,
            "gradient_clipping": float(self.cfg["max_grad_norm"]),
            "optimizer": {"type": "AdamW", "params": {"lr": float(self.cfg["learning_rate"]),
                                                       "weight_decay": float(self.cfg["weight_decay"])}},
            "bf16": {"enabled": next(self.model.parameters()).dtype == torch.bfloat16},
            "zero_optimization": {"stage": 2},
        }
        config.update(self.cfg.get("deepspeed") or {})
        self.ds_engine, optimizer, _, _ = deepspeed.initialize(model=self.model, config=config,
                                                               model_parameters=self.model.parameters())
        return optimizer

    def _plan(self, batch, use_ref: bool) -> list[int]:
        # Every trajectory in the loss goes through backward, so DeepSpeed's own step logic always runs.
        return [i for i in range(batch.size) if use_ref or batch.weights[i] > 0]

    def _zero_grad(self) -> None:
        self.ds_engine.zero_grad()

    def _backward(self, loss: torch.Tensor, last: bool) -> None:
        # Micro-batch losses are already weighted to sum to the batch loss: no GAS rescaling.
        self.ds_engine.set_gradient_accumulation_boundary(last)
        self.ds_engine.backward(loss, scale_wrt_gas=False)

    def _step(self) -> float:
        self.ds_engine.step()
        norm = self.ds_engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0


def make_engine(recipe: dict, model, *, ref_model=None) -> TorchEngine:
    """The engine named by `grpo.engine` (torch | deepspeed)."""
    name = recipe["grpo"]["engine"]
    cls = {"torch": TorchEngine, "deepspeed": DeepSpeedEngine}.get(name)
    if cls is None:
        raise TrainError(f"recipe.yaml: grpo.engine: {name!r} is not an engine; use torch or deepspeed")
    return cls(model, recipe["grpo"], temperature=float(recipe["rollout"]["temperature"]), ref_model=ref_model)
