"""`srl-profile weight-sync`: time publishing weights of a given size to N receivers, by method.

Two methods, each run for real by ``world = n_instances + 1`` processes (rank 0 is the trainer,
ranks 1..N the inference instances), started with ``torch.multiprocessing`` and rendezvousing
through a ``file://`` store:

- ``broadcast``: the trainer's ``bytes`` of bf16 weights travel as ``buckets`` tensors of at most
  ``--bucket-mb`` MiB, each with ``torch.distributed.broadcast(src=0)``: the gloo backend on CPU,
  NCCL on GPUs (rank r on ``cuda:r``), as verl / slime / NeMo-RL's collective weight sync do.
- ``filesystem``: the checkpoint path. The trainer writes the buckets with ``torch.save`` into one
  file under ``--dir`` and ``os.fsync``\\ s it; then every instance ``torch.load``\\ s it
  concurrently (onto its device). Reads right after the write come from the page cache, as they do
  on a node-local disk; a shared filesystem is measured by pointing ``--dir`` at it.

The clock: every rank passes a barrier, rank 0 reads ``time.perf_counter``, the transfer runs,
all ranks pass a second barrier (so the time covers the slowest receiver; on CUDA after
``torch.cuda.synchronize``) and rank 0 reads the clock again. ``--warmup`` untimed and
``--repeats`` timed transfers per size; value = median, spread = std. Each point is one
``weight_sync`` observation (inputs ``bytes``, ``n_instances``, ``buckets``, ``method``,
``backend``) that ``srl-regress fit --family weight_sync`` reads. Nothing is modelled.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import numpy as np

from simrl.cost.observations import Observation, make

PROFILER = "srl-profile weight-sync"
METHODS = ("broadcast", "filesystem")
MiB = 2**20
ELEMENT_BYTES = 2  # bf16


@attrs.frozen
class SyncPlan:
    sizes_bytes: tuple[int, ...] = (4 * MiB, 16 * MiB, 64 * MiB)
    instances: tuple[int, ...] = (1, 2)
    methods: tuple[str, ...] = ("broadcast",)
    bucket_mb: float = 16.0
    repeats: int = 3
    warmup: int = 1
    device: str = "cpu"
    start_method: str = "spawn"
    directory: str | None = None

    @property
    def backend(self) -> str:
        return "nccl" if self.device == "cuda" else "gloo"


def validate(plan: SyncPlan) -> None:
    if not plan.sizes_bytes or any(s < ELEMENT_BYTES for s in plan.sizes_bytes):
        raise ValueError(f"--sizes-mb must be positive, got {[s / MiB for s in plan.sizes_bytes]}")
    if not plan.instances or any(n < 1 for n in plan.instances):
        raise ValueError(f"--instances expects positive integers, got {list(plan.instances)}")
    bad = [m for m in plan.methods if m not in METHODS]
    if not plan.methods or bad:
        raise ValueError(f"--method expects some of {', '.join(METHODS)}, got {list(plan.methods)}")
    if plan.bucket_mb <= 0:
        raise ValueError(f"--bucket-mb must be > 0, got {plan.bucket_mb}")
    if plan.repeats < 1 or plan.warmup < 0:
        raise ValueError("--repeats must be >= 1 and --warmup >= 0")
    if plan.device not in ("cpu", "cuda"):
        raise ValueError(f"--device expects cpu or cuda, got {plan.device!r}")
    if plan.start_method == "fork" and plan.device == "cuda":
        raise ValueError("--start-method fork cannot be used with CUDA")


def bucket_sizes(size_bytes: int, bucket_bytes: int) -> list[int]:
    """Element counts of the buckets that carry ``size_bytes`` of bf16 in chunks of ``bucket_bytes``.

    E.g. 40 MiB in 16 MiB buckets -> [8 Mi, 8 Mi, 4 Mi] elements (16 + 16 + 8 MiB).
    """
    elems = size_bytes // ELEMENT_BYTES
    per = max(bucket_bytes // ELEMENT_BYTES, 1)
    n = math.ceil(elems / per)
    return [per] * (n - 1) + [elems - per * (n - 1)]


def sync_observation(method: str, plan: SyncPlan, size_bytes: int, n_instances: int, times: Sequence[float],
                     buckets: int, provenance: dict) -> Observation:
    arr = np.asarray(times, float)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{method} {size_bytes} bytes to {n_instances}: unusable times {list(arr)}")
    inputs = {"bytes": int(size_bytes), "n_instances": int(n_instances), "buckets": int(buckets),
              "method": method, "backend": plan.backend, "device": plan.device, "dtype": "bf16",
              "bucket_bytes": int(plan.bucket_mb * MiB)}
    prov = {**provenance, "timing": {"median": float(np.median(arr)), "min": float(arr.min()),
                                     "max": float(arr.max()), "std": float(arr.std()),
                                     "repeats": int(arr.size), "warmup": plan.warmup, "unit": "s",
                                     "clock": "rank 0 perf_counter between barriers"}}
    return make("weight_sync", float(np.median(arr)), "s", inputs, prov, spread=float(arr.std()))


def _worker(rank: int, world: int, store: str, plan_dict: dict, method: str, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    plan = SyncPlan(**{**plan_dict, "sizes_bytes": tuple(plan_dict["sizes_bytes"])})
    torch.set_num_threads(1)
    if plan.device == "cuda":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    else:
        dev = torch.device("cpu")
    dist.init_process_group(plan.backend, init_method=store, rank=rank, world_size=world)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        dist.barrier()

    try:
        results = {}
        ckpt = Path(plan.directory or tempfile.gettempdir()) / f"srl-weight-sync-{os.getppid()}.pt"
        for size in plan.sizes_bytes:
            shapes = bucket_sizes(size, int(plan.bucket_mb * MiB))
            bufs = [torch.zeros(n, dtype=torch.bfloat16, device=dev) for n in shapes]
            if rank == 0:
                for b in bufs:
                    b.normal_()
            times = []
            for i in range(plan.warmup + plan.repeats):
                sync()
                t0 = time.perf_counter()
                if method == "broadcast":
                    for b in bufs:
                        dist.broadcast(b, src=0)
                else:
                    if rank == 0:
                        with open(ckpt, "wb") as fh:
                            torch.save({f"bucket{j}": b for j, b in enumerate(bufs)}, fh)
                            fh.flush()
                            os.fsync(fh.fileno())
                    dist.barrier()
                    if rank > 0:
                        got = torch.load(ckpt, map_location=dev, weights_only=True)
                        bufs = [got[f"bucket{j}"] for j in range(len(shapes))]
                sync()
                if i >= plan.warmup:
                    times.append(time.perf_counter() - t0)
            results[str(size)] = {"times": times, "buckets": len(shapes)}
            del bufs
        if rank == 0:
            if method == "filesystem" and ckpt.exists():
                ckpt.unlink()
            with open(out_path + ".tmp", "w", encoding="utf-8") as fh:
                json.dump(results, fh)
            os.replace(out_path + ".tmp", out_path)
    finally:
        dist.destroy_process_group()


@attrs.frozen
class SyncProfile:
    observations: list[Observation]
    hardware: str


def profile_weight_sync(plan: SyncPlan, progress: Callable[[str], None] | None = None) -> SyncProfile:
    from adapters.fsdp import require_torch
    from adapters.provenance import collect

    validate(plan)
    torch = require_torch()
    if plan.device == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n < max(plan.instances) + 1:
            raise ValueError(f"--device cuda: {max(plan.instances) + 1} ranks need as many GPUs (NCCL: one NVIDIA "
                             f"GPU per rank and a CUDA build of torch); torch {torch.__version__} sees {n}. "
                             "Use --device cpu (gloo) or fewer --instances")
    import torch.multiprocessing as mp

    if plan.device == "cpu":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    prov = collect(PROFILER, torch=torch, device="cuda:0" if plan.device == "cuda" else "cpu",
                   extra_software={"backend": plan.backend})
    obs: list[Observation] = []
    for method in plan.methods:
        for n in sorted(plan.instances):
            with tempfile.TemporaryDirectory(prefix="srl-ws-") as tmp:
                out = str(Path(tmp) / "out.json")
                mp.start_processes(_worker, args=(n + 1, "file://" + str(Path(tmp) / "store"), attrs.asdict(plan),
                                                  method, out), nprocs=n + 1, join=True,
                                   start_method=plan.start_method)
                with open(out, encoding="utf-8") as fh:
                    res = json.load(fh)
            for size in plan.sizes_bytes:
                r = res[str(size)]
                ob = sync_observation(method, plan, size, n, r["times"], r["buckets"], prov)
                obs.append(ob)
                if progress:
                    progress(f"{method:<10} {size / MiB:8.1f} MiB -> {n} instance(s): {ob.value * 1e3:9.2f} ms "
                             f"({ob.inputs['buckets']} buckets, {plan.backend})")
    return SyncProfile(obs, prov["hardware"])
