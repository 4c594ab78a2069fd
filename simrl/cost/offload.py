"""Trainer offload: parameters, gradients and optimizer states moved to host memory and back.

What a trainer with offload pays per step, priced as bytes over the GPU's host link (the catalog's
``host_bw``, one direction, times ``host_link_efficiency``) plus the CPU optimizer step, and
reported as two phases of the training step:

- ``offload`` (verl's Megatron and FSDP workers: ``megatron.param_offload`` / ``grad_offload`` /
  ``optimizer_offload``, ``fsdp_config.param_offload`` / ``optimizer_offload``): each phase that
  runs the actor (old-log-prob recompute, the update) loads the parameter shard to the GPU and
  offloads it after, so 2 x parameter bytes per such phase; the reference model (its own
  ``ref.megatron.param_offload``, taken to be the same switch) 2 x its parameter bytes per forward;
  the update also moves the optimizer states (``optimizer_offload``) in and out: 2 x 12 B per
  parameter of the optimizer shard. The gradient buffer is released and re-zeroed, not copied
  (``load_megatron_model_to_gpu`` resizes ``grad_data`` and zeroes it), so ``grad_offload`` moves no
  bytes. Checked against volcengine/verl@b178a3cd
  ``verl/workers/megatron_workers.py`` (``load_megatron_model_to_gpu`` / ``offload_megatron_model_to_cpu``
  / ``load_megatron_optimizer`` / ``offload_megatron_optimizer`` around ``compute_log_prob``,
  ``compute_ref_log_prob`` and ``update_actor``).
- ``cpu_optimizer`` (Megatron-core's ``optimizer_cpu_offload`` with ``optimizer_offload_fraction``
  f, default 0.0 as in Megatron-core's ``OptimizerConfig``; verl's 30B recipe sets 1.0; the
  ``HybridDeviceOptimizer`` of ``megatron/core/optimizer/cpu_offloading``): the fraction f of
  the optimizer shard is stepped on the CPU: its fp32 gradients go to host (4 B per parameter),
  ``torch.optim.AdamW`` runs there (``ADAM_HOST_TRAFFIC_BYTES`` per parameter through host memory
  at ``cpu_optimizer_bytes_per_s`` per GPU's share of the host), and the updated fp32 parameters come
  back (4 B); the GPU optimizer steps only ``1 - f`` of the shard, and the states of the CPU part
  are on host, so ``optimizer_offload`` moves only the GPU part. Its optimizer states leave the
  GPU's memory.

The copies of one phase run one after another with compute (verl offloads synchronously), so
the seconds add to the step. Nothing here is fitted: the host link is the catalog's datasheet
figure; ``cpu_optimizer_bytes_per_s`` (20 GB/s per GPU) is an assumption: a 2-socket DDR5 host
(~600 GB/s peak) shared by 8 GPU processes is ~75 GB/s per GPU, and an unfused CPU AdamW reaches
a fraction of it.
"""

from __future__ import annotations

import attrs
from attrs import validators as v

ADAM_STATE_BYTES = 12  # fp32 master weights + two fp32 moments
ADAM_HOST_TRAFFIC_BYTES = 28  # CPU AdamW: read grad, param, m, v (16); write param, m, v (12)
GRAD_H2D_BYTES = 4  # fp32 gradient to host
PARAM_D2H_BYTES = 4  # updated fp32 parameter back to the GPU

KNOBS = ("param_offload", "grad_offload", "optimizer_offload", "optimizer_cpu_offload",
         "optimizer_offload_fraction", "host_link_efficiency", "cpu_optimizer_bytes_per_s")


@attrs.frozen
class TrainerOffload:
    """Seconds a trainer's offload adds per step, from its per-GPU bytes (module doc)."""

    host_bytes_per_s: float = attrs.field(validator=v.gt(0.0))  # one GPU's host link, effective
    param_bytes: float = attrs.field(validator=v.ge(0.0))  # parameter shard on one GPU
    optimizer_params: float = attrs.field(validator=v.ge(0.0))  # parameters in the GPU's optimizer shard
    param_offload: bool = False
    grad_offload: bool = False
    optimizer_offload: bool = False
    optimizer_cpu_offload: bool = False
    optimizer_offload_fraction: float = attrs.field(default=0.0, validator=[v.ge(0.0), v.le(1.0)])  # Megatron-core default
    cpu_optimizer_bytes_per_s: float = attrs.field(default=20e9, validator=v.gt(0.0))

    @property
    def cpu_fraction(self) -> float:
        """Share of the optimizer shard stepped on the CPU."""
        return self.optimizer_offload_fraction if self.optimizer_cpu_offload else 0.0

    def transfer_s(self, actor_phases: int, ref_forwards: int) -> float:
        """``offload``: host <-> GPU copies around ``actor_phases`` actor phases (one of them the
        update) and ``ref_forwards`` reference forwards (gradients are freed, not copied)."""
        moved = 0.0
        if self.param_offload:
            moved += 2 * self.param_bytes * (actor_phases + ref_forwards)
        if self.optimizer_offload:
            moved += 2 * self.optimizer_params * (1 - self.cpu_fraction) * ADAM_STATE_BYTES
        return moved / self.host_bytes_per_s

    def cpu_optimizer_s(self) -> float:
        """``cpu_optimizer``: gradients to host, CPU AdamW, parameters back."""
        n = self.optimizer_params * self.cpu_fraction
        if n == 0:
            return 0.0
        link = n * (GRAD_H2D_BYTES + PARAM_D2H_BYTES) / self.host_bytes_per_s
        return link + n * ADAM_HOST_TRAFFIC_BYTES / self.cpu_optimizer_bytes_per_s
