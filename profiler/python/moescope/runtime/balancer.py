"""ExpertBalancer: aux-loss-free router biases, load prediction and expert re-placement for the
moescope MoELayers of a model, driven by one step() after optimizer.step().

    balancer = ExpertBalancer(model, optimizer, interval_steps=20)
    for batch in data:
        loss = model(batch).loss; loss.backward()
        optimizer.step(); balancer.step(); optimizer.zero_grad()

step() on every rank of the expert-parallel group together:
  1. update_expert_bias() of every layer built with enable_expert_bias (bias += rate *
     sign(mean - load), load summed over the group since the last step);
  2. moescope::runtime::ExpertRebalancer::after_step: the layers' tokens per expert summed over
     the group feed the load predictor (EMA or window); every interval_steps after warmup_steps
     the planner proposes a placement per layer (replicas of hot experts in the redundant slots,
     experts moved between ranks) and applies it when its predicted net gain over the interval
     pays for the replicas' gradient sync and the move (rule="net"; docs/balancer.md). Expert weights, their gradients and this optimizer's state for them (exp_avg, ...)
     move over the group. Every decision is written to the trace while `moescope record` runs
     (moescope_rebalance records, predicted load, replica counts), as moe_train's are.
Replicated experts need their gradients summed over replicas before each optimizer step. With
an optimizer the balancer registers a step pre-hook that makes the step's one all-reduce
(`ar.balancer_step`): every layer's replica gradients (needed before the update), with the
router biases' loads and the rebalancer's loads, step time and cost sums riding along for
step(). So the balancer adds one collective per optimizer step, whatever the number of layers
(step() makes it itself when no hook ran: no optimizer given).
"""

import time
from typing import Dict, List, Optional

import torch

from . import _library
from .hf import moe_layers
from .layer import set_training_step


# Replica gradients up to this many elements travel in float64 with step()'s sums, in one
# all-reduce; larger ones in their own dtype, in their own all-reduce.
_PACK_LIMIT_ELEMENTS = 1 << 18


class ExpertBalancer:
    def __init__(self, model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer] = None,
                 interval_steps: int = 50, warmup_steps: int = 10,
                 imbalance_threshold: float = 1.10, transfer_bytes_per_second: float = 10e9,
                 incremental_max_over_mean: float = 1.02, ema_alpha: float = 0.1,
                 window_steps: int = 0, update_bias: bool = True, rebalance: bool = True,
                 mark_steps: bool = True, first_step: int = 0, rule: str = "net",
                 plan_for_next_window: bool = True):
        """`model` holds moescope MoELayers (e.g. after replace_moe_blocks), all over one
        expert-parallel group. `optimizer` (any torch.optim optimizer) holds their parameters:
        its per-parameter state moves with the experts. `window_steps` > 0 predicts by a moving
        window instead of the EMA. `update_bias=False` leaves the router biases alone,
        `rebalance=False` never moves experts. `mark_steps` writes the step number into the
        trace (moescope::runtime::set_training_step), as moe_train does. `rule` "net" applies a
        planned placement when its predicted net gain over the next interval (the busiest rank's
        rows saved x the measured ms per row, less the replicas' gradient all-reduce and the
        move amortised) is a gain beyond its uncertainty; "imbalance" is the earlier rule
        (imbalance ratio x step time vs bytes / transfer_bytes_per_second).
        `plan_for_next_window` weighs each plan over the load forecast and the forecast plus
        each of its last window errors (False: the forecast alone)."""
        if rule not in ("net", "imbalance"):
            raise ValueError(f"ExpertBalancer: rule must be 'net' or 'imbalance', got {rule!r}")
        _library.load()
        self.layers = moe_layers(model)
        if not self.layers:
            raise ValueError(f"ExpertBalancer: {type(model).__name__} holds no moescope MoELayer "
                             "(replace_moe_blocks first)")
        self.optimizer = optimizer
        self.update_bias = update_bias
        self.rebalance = rebalance
        self.mark_steps = mark_steps
        self.step_number = first_step
        self.decisions: List[Dict[str, float]] = []
        options = {"interval_steps": interval_steps, "warmup_steps": warmup_steps,
                   "imbalance_threshold": imbalance_threshold,
                   "transfer_bytes_per_second": transfer_bytes_per_second,
                   "incremental_max_over_mean": incremental_max_over_mean,
                   "ema_alpha": ema_alpha, "window_steps": window_steps,
                   "imbalance_rule": 1.0 if rule == "imbalance" else 0.0,
                   "plan_for_next_window": 1.0 if plan_for_next_window else 0.0,
                   # The replicas' gradients ride on the step's one all-reduce: a new replica
                   # adds bytes to it, not a collective.
                   "replica_gradients_packed": 1.0}
        self._rebalancer = torch.classes.moescope.ExpertRebalancer(
            {key: float(value) for key, value in options.items()})
        for layer in self.layers:
            self._rebalancer.add_layer(layer._layer)
        self._hook = None
        if optimizer is not None:
            self._hook = optimizer.register_step_pre_hook(self._before_optimizer_step)
        self._summed = None  # (biased layers, their summed loads + the rebalancer's sums)
        self._last_time = time.perf_counter()
        if mark_steps:
            set_training_step(self.step_number)

    def _sum_over_group(self, parts: List[torch.Tensor], name: str) -> List[torch.Tensor]:
        """`parts` (any shapes, one dtype) summed over the expert-parallel group in one
        all-reduce, recorded as the comm op `name`."""
        flat = torch.cat([part.reshape(-1) for part in parts])
        if flat.numel() == 0:
            return list(parts)
        summed = self.layers[0]._layer.all_reduce_sum(flat, name)
        out, offset = [], 0
        for part in parts:
            out.append(summed[offset:offset + part.numel()].view(part.shape))
            offset += part.numel()
        return out

    def _step_parts(self):
        """This rank's values step() needs summed over the group: each biased layer's load since
        its last update, then the rebalancer's step sums (loads, step time, cost fits)."""
        now = time.perf_counter()
        step_seconds, self._last_time = now - self._last_time, now
        biased = [layer for layer in self.layers
                  if self.update_bias and layer.config.enable_expert_bias]
        parts = [layer._layer.expert_bias_partial_load().double() for layer in biased]
        if self.rebalance:
            parts.append(self._rebalancer.local_step_sums(step_seconds))
        return biased, parts

    def _before_optimizer_step(self, optimizer, args, kwargs):
        """The step's one all-reduce: the replicas' gradients (summed before the update) with
        step()'s sums riding along, in float64 (the cost fits' sums need it). Replica gradients
        larger than _PACK_LIMIT_ELEMENTS keep their dtype in an all-reduce of their own
        (`ar.replica_sync`): there bytes cost more than a second collective's latency."""
        for layer in self.layers:
            layer._layer.bind(layer._tensors())
        replicas = [layer._layer.replica_gradient_partial_sums() for layer in self.layers]
        biased, parts = self._step_parts()
        parts = [part.double() for part in parts]
        if sum(r.numel() for r in replicas) > _PACK_LIMIT_ELEMENTS:
            summed_replicas = self._sum_over_group(replicas, "ar.replica_sync")
            summed = self._sum_over_group(parts, "ar.balancer_step") if parts else []
        else:
            summed = self._sum_over_group([r.double() for r in replicas] + parts,
                                          "ar.balancer_step")
            summed_replicas, summed = summed[:len(replicas)], summed[len(replicas):]
        for layer, sums in zip(self.layers, summed_replicas):
            layer._layer.take_replica_gradient_sums(sums)
        self._summed = (biased, summed)

    def _optimizer_state(self, layer) -> List[torch.Tensor]:
        """This optimizer's per-slot state of the layer's expert weights (same shape)."""
        if self.optimizer is None:
            return []
        tensors = []
        for parameter in (layer.w_gate_up, layer.w_down):
            for value in self.optimizer.state.get(parameter, {}).values():
                if torch.is_tensor(value) and value.shape == parameter.shape:
                    tensors.append(value)
        return tensors

    def step(self) -> List[Dict[str, float]]:
        """Call after optimizer.step() on every rank together. Returns the decisions taken at this
        step (one dict per layer on decision steps: imbalance_before/after, applied, moves,
        bytes_sent/received, seconds, ...)."""
        for layer in self.layers:
            layer._layer.bind(layer._tensors())
        if self._summed is None:  # no optimizer hook ran: the all-reduce is made here
            biased, parts = self._step_parts()
            self._summed = (biased,
                            self._sum_over_group(parts, "ar.balancer_step") if parts else [])
        (biased, summed), self._summed = self._summed, None
        for layer, load in zip(biased, summed):
            layer._layer.update_expert_bias_from(load)
        decisions = []
        if self.rebalance:
            for position, layer in enumerate(self.layers):
                self._rebalancer.set_extra_slot_state(position, self._optimizer_state(layer))
            decisions = [dict(d) for d in self._rebalancer.after_summed_step(self.step_number,
                                                                            summed[-1])]
            self.decisions.extend(decisions)
        self.step_number += 1
        if self.mark_steps:
            set_training_step(self.step_number)
        return decisions

    def predicted_load(self, layer_position: int = 0) -> List[float]:
        """The load predictor's tokens per expert for the next steps of one layer."""
        return list(self._rebalancer.predicted_load(layer_position))

    def remove(self) -> None:
        """Removes the optimizer hook (the balancer does nothing more)."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
