"""`srl-profile fsdp`: FSDP2 training-step time and peak memory per sharding, world size and sequence length.

For a dense model of `simrl.cost.architectures` (default ``simrl/tiny-llama``, small enough for a
CPU), the profiler builds a LLaMA-style decoder **in code** (token embedding, per layer RMSNorm +
grouped-query causal attention with rotary positions + RMSNorm + SwiGLU MLP, final norm, untied LM
head; random weights, nothing downloaded), shards every decoder layer and then the root with
FSDP2's ``torch.distributed.fsdp.fully_shard`` over a 1-D mesh of ``world`` processes, and times
full optimizer steps (forward, cross-entropy loss, backward, ``AdamW.step``, ``zero_grad``) on
random token ids.

- Processes: ``torch.multiprocessing`` (``--start-method``) starts ``world`` ranks that
  rendezvous through a ``file://`` store in a temporary folder. CPU runs use the ``gloo`` backend with ``--threads``
  intra-op threads per rank; GPU runs use ``nccl`` with rank *r* on ``cuda:r``. The same code
  path does both; only the device, backend, clock and memory reading differ.
- Sharding: ``full`` is ``reshard_after_forward=True`` (parameters re-sharded after forward and
  gathered again for backward: ZeRO-3, recorded as ``zero_stage: 3``); ``grad-op`` is
  ``reshard_after_forward=False`` (kept unsharded from forward to backward: ZeRO-2, ``zero_stage: 2``),
  FSDP1's FULL_SHARD / SHARD_GRAD_OP.
- Per (world, sharding) the model is built once. Sequence lengths first run once each in ascending
  order: ``--warmup`` untimed steps, the first timed step and the memory reading; the other
  ``--steps - 1`` timed steps go round robin over the lengths (alternating direction), so a
  change in the machine's load lands on every length of a world alike. Every rank holds
  ``--micro-batch`` sequences, so one optimizer step trains ``micro_batch * world`` sequences:
  ``inputs.seq_lens`` lists them all, as the ``training_step`` observation requires
  (docs/observations.md).
- Schedule: ``--schedule interleaved`` (the CPU default) starts every world's ranks at once and lets
  the worlds take turns one optimizer step at a time (the parent hands each world's rank 0 a
  semaphore; the other ranks wait in a barrier), so a load that comes and goes falls on every world
  alike instead of on whichever world ran at the time. ``sequential`` (the CUDA default: each world
  needs its own GPUs) runs one world after another. A rank that fails stops the run with its
  traceback.
- Time: each rank reads its clock around a step after a barrier. ``--clock wall``
  (``time.perf_counter``; on CUDA after ``torch.cuda.synchronize``) is the step time: the slowest
  rank's. ``--clock process`` (CPU only: ``time.process_time``, the CPU seconds of all the rank's
  threads, gloo's included) is what the step costs a rank with a core to itself, and stays
  meaningful when ranks outnumber cores or other work shares the machine: waiting is not counted.
  Its per-step value is the median over ranks (they do the same work; their max would grow with
  the process count from noise alone). ``value`` = median over the timed steps, ``spread`` = their
  standard deviation. Both clocks are always kept in ``provenance.timing``.
- Peak memory: CUDA ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` (the
  allocator's live tensors); CPU ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (the process's
  resident high-water mark, the runtime included; read in the ascending first pass, so each
  point's reading is its own peak). The maximum over ranks is recorded, in bytes.

The adapter records what ran; it fits nothing. Pure parts (planning, the model shapes,
observation assembly) are importable without torch; torch is imported lazily in the workers and in
`profile_fsdp`.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from adapters.extras import require
from simrl.cost.architectures import ModelArch, model_arch
from simrl.cost.observations import Observation, make

PROFILER = "srl-profile fsdp"
DEFAULT_MODEL = "simrl/tiny-llama"
SHARDINGS = {"full": (True, 3), "grad-op": (False, 2)}  # name -> (reshard_after_forward, zero_stage)
CLOCKS = ("wall", "process")
RANK_AGGREGATE = {"wall": np.max, "process": np.median}  # per step, over ranks (see point_observations)
START_METHODS = ("spawn", "fork", "forkserver")
SCHEDULES = ("auto", "interleaved", "sequential")
NORM_EPS = 1e-6


@attrs.frozen
class FsdpPlan:
    """What one `srl-profile fsdp` run measures."""

    model: str = DEFAULT_MODEL
    world_sizes: tuple[int, ...] = (1, 2)
    seq_lens: tuple[int, ...] = (64, 128, 256)
    shardings: tuple[str, ...] = ("full",)
    micro_batch: int = 1
    steps: int = 3
    warmup: int = 1
    device: str = "cpu"
    clock: str = "wall"
    start_method: str = "spawn"
    threads: int = 1
    dtype: str = "fp32"
    activation_checkpointing: bool = False
    seed: int = 0
    schedule: str = "auto"  # interleaved | sequential | auto (interleaved on CPU, sequential on CUDA)

    @property
    def backend(self) -> str:
        return "nccl" if self.device == "cuda" else "gloo"

    @property
    def interleaved(self) -> bool:
        return self.schedule == "interleaved" or (self.schedule == "auto" and self.device == "cpu")


DTYPES = ("fp32", "bf16")


def validate_plan(plan: FsdpPlan) -> ModelArch:
    """Check the plan; return the model's architecture. Errors name the option."""
    arch = model_arch(plan.model)
    if arch.is_moe or arch.n_linear_attention:
        raise ValueError(f"--model {arch.name}: the FSDP profiler builds dense full-attention models only")
    if arch.heads % arch.kv_heads:
        raise ValueError(f"--model {arch.name}: {arch.heads} heads do not group over {arch.kv_heads} KV heads")
    for name, vals in (("--world-sizes", plan.world_sizes), ("--seq-lens", plan.seq_lens)):
        if not vals or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in vals):
            raise ValueError(f"{name} expects positive integers, got {list(vals)}")
    if max(plan.seq_lens) > arch.max_position:
        raise ValueError(f"--seq-lens: {max(plan.seq_lens)} exceeds {arch.name}'s max_position {arch.max_position}")
    unknown = [s for s in plan.shardings if s not in SHARDINGS]
    if not plan.shardings or unknown:
        raise ValueError(f"--sharding expects some of {', '.join(SHARDINGS)}, got {list(plan.shardings)}")
    for name, val, low in (("--micro-batch", plan.micro_batch, 1), ("--steps", plan.steps, 1),
                           ("--warmup", plan.warmup, 0), ("--threads", plan.threads, 1)):
        if val < low:
            raise ValueError(f"{name} must be >= {low}, got {val}")
    if plan.device not in ("cpu", "cuda"):
        raise ValueError(f"--device expects cpu or cuda, got {plan.device!r}")
    if plan.clock not in CLOCKS:
        raise ValueError(f"--clock expects one of {', '.join(CLOCKS)}, got {plan.clock!r}")
    if plan.clock == "process" and plan.device == "cuda":
        raise ValueError("--clock process measures CPU seconds; on CUDA use --clock wall")
    if plan.start_method not in START_METHODS:
        raise ValueError(f"--start-method expects one of {', '.join(START_METHODS)}, got {plan.start_method!r}")
    if plan.start_method == "fork" and plan.device == "cuda":
        raise ValueError("--start-method fork cannot be used with CUDA (a forked child cannot initialise it)")
    if plan.schedule not in SCHEDULES:
        raise ValueError(f"--schedule expects one of {', '.join(SCHEDULES)}, got {plan.schedule!r}")
    if plan.schedule == "interleaved" and plan.device == "cuda":
        raise ValueError("--schedule interleaved keeps every world's ranks alive at once: CPU only "
                         "(on CUDA each world needs its own GPUs); use sequential")
    if plan.dtype not in DTYPES:
        raise ValueError(f"--dtype expects one of {', '.join(DTYPES)}, got {plan.dtype!r}")
    return arch


MAX_WORLD = 4096  # processes (or receivers) one profiling command starts
MAX_SEQ_LEN = 1 << 24


def parse_ints(text: str, option: str, hi: int = MAX_SEQ_LEN) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4), sorted, duplicates dropped; each in [1, hi] (`adapters.listopt`)."""
    from adapters.listopt import parse_int_list

    return parse_int_list(text, option, 1, hi)


def step_inputs(plan: FsdpPlan, arch: ModelArch, world: int, sharding: str, seq_len: int) -> dict:
    """The ``inputs`` of one training_step observation (both the time and the memory one)."""
    reshard, zero = SHARDINGS[sharding]
    return {
        "seq_lens": [int(seq_len)] * (plan.micro_batch * world),
        "tp": 1, "pp": 1, "dp": int(world),
        "model": arch.name,
        "zero_stage": zero,
        "activation_checkpointing": bool(plan.activation_checkpointing),
        "framework": "fsdp2",
        "sharding": sharding,
        "reshard_after_forward": reshard,
        "micro_batch": plan.micro_batch,
        "backend": plan.backend,
        "dtype": plan.dtype,
        "device": plan.device,
    }


def point_observations(plan: FsdpPlan, arch: ModelArch, world: int, sharding: str, seq_len: int,
                       rank_steps: Sequence[dict], provenance: dict) -> list[Observation]:
    """Time and memory observations of one (world, sharding, seq_len) point.

    ``rank_steps[r]`` is rank r's record: ``wall`` and ``process`` (lists of seconds, one per timed
    step) and ``peak_bytes``. On the wall clock a step lasts as long as its slowest rank (the max
    over ranks). The process clock counts each rank's own CPU seconds, which do not wait for one
    another: every rank does the same work, so the median over ranks is the per-rank cost (their
    max would grow with the process count from noise alone: the largest of more samples).
    """
    if len(rank_steps) != world:
        raise ValueError(f"expected {world} rank records, got {len(rank_steps)}")
    per_clock = {}
    for clock in CLOCKS:
        rows = np.array([r[clock] for r in rank_steps], dtype=float)  # [rank, step]
        if rows.ndim != 2 or rows.shape[1] != plan.steps:
            raise ValueError(f"rank records must hold {plan.steps} {clock} times each")
        per_clock[clock] = RANK_AGGREGATE[clock](rows, axis=0)
    times = per_clock[plan.clock]
    if not np.all(np.isfinite(times)) or np.any(times <= 0):
        raise ValueError(f"world={world} seq_len={seq_len}: a step read {float(times.min())!r} s")
    timing = {c: {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()),
                  "std": float(v.std()), "steps": [float(x) for x in v]} for c, v in per_clock.items()}
    prov = {**provenance, "timing": {"clock": plan.clock, "unit": "s", "steps": plan.steps,
                                     "warmup": plan.warmup, "per_rank_threads": plan.threads,
                                     "over_ranks": {c: RANK_AGGREGATE[c].__name__ for c in CLOCKS},
                                     "order": "round-robin over seq_lens", **timing}}
    inputs = step_inputs(plan, arch, world, sharding, seq_len)
    peak = max(int(r["peak_bytes"]) for r in rank_steps)
    memory_how = "torch.cuda.max_memory_allocated" if plan.device == "cuda" else "ru_maxrss (process RSS high-water)"
    return [
        make("training_step", float(np.median(times)), "s", inputs, prov, spread=float(times.std())),
        make("training_step", float(peak), "bytes", dict(inputs),
             {**provenance, "memory": {"reading": memory_how, "max_over_ranks": True,
                                        "per_rank_bytes": [int(r["peak_bytes"]) for r in rank_steps]}}),
    ]


# -- the model (torch) ---------------------------------------------------------------------------

def build_model(torch, arch: ModelArch, activation_checkpointing: bool = False):
    """A LLaMA-style decoder of ``arch``'s shape (random weights), as an ``nn.Module``."""
    nn, F = torch.nn, torch.nn.functional
    hd, heads, kv = arch.head_dim, arch.heads, arch.kv_heads

    class RMSNorm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS) * self.weight

    def rope(x, cos, sin):  # x: [b, h, s, hd]
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm(arch.hidden)
            self.qkv = nn.Linear(arch.hidden, (heads + 2 * kv) * hd, bias=False)
            self.o_proj = nn.Linear(heads * hd, arch.hidden, bias=False)
            self.post_attention_layernorm = RMSNorm(arch.hidden)
            self.gate_up = nn.Linear(arch.hidden, 2 * arch.intermediate, bias=False)
            self.down = nn.Linear(arch.intermediate, arch.hidden, bias=False)

        def _forward(self, x, cos, sin):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.input_layernorm(x)).split([heads * hd, kv * hd, kv * hd], dim=-1)
            q = rope(q.view(b, s, heads, hd).transpose(1, 2), cos, sin)
            k = rope(k.view(b, s, kv, hd).transpose(1, 2), cos, sin)
            v = v.view(b, s, kv, hd).transpose(1, 2)
            if kv != heads:
                k = k.repeat_interleave(heads // kv, dim=1)
                v = v.repeat_interleave(heads // kv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o_proj(a.transpose(1, 2).reshape(b, s, heads * hd))
            g, u = self.gate_up(self.post_attention_layernorm(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(g) * u)

        def forward(self, x, cos, sin):
            if activation_checkpointing and self.training:
                from torch.utils.checkpoint import checkpoint

                return checkpoint(self._forward, x, cos, sin, use_reentrant=False)
            return self._forward(x, cos, sin)

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(arch.vocab, arch.hidden)
            self.layers = nn.ModuleList(Block() for _ in range(arch.layers))
            self.norm = RMSNorm(arch.hidden)
            self.lm_head = nn.Linear(arch.hidden, arch.vocab, bias=False)

        def forward(self, ids):
            s = ids.shape[1]
            inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=ids.device, dtype=torch.float32) / hd))
            ang = torch.outer(torch.arange(s, device=ids.device, dtype=torch.float32), inv)
            x = self.embed(ids)
            cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
            for layer in self.layers:
                x = layer(x, cos, sin)
            return self.lm_head(self.norm(x))

    if not arch.gated_mlp:
        raise ValueError(f"{arch.name}: the FSDP profiler builds gated-MLP (SwiGLU) models only")
    return Decoder()


def count_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# -- the workers ---------------------------------------------------------------------------------

def _peak_bytes(torch, dev) -> int:
    if dev.type == "cuda":
        return int(torch.cuda.max_memory_allocated(dev))
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def _worker(rank: int, world: int, store: str, plan_dict: dict, sharding: str, out_path: str,
            turn: tuple | None = None) -> None:
    """One rank: build, shard, time every sequence length; rank 0 writes all ranks' records.

    ``turn`` = (go, done) semaphores when several worlds run interleaved: before each step rank 0
    waits for ``go``, and after it (all ranks past a barrier) releases ``done``, so exactly one
    world steps at a time and the parent decides which.
    """
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    plan = FsdpPlan(**plan_dict)
    arch = model_arch(plan.model)
    parent = os.getppid()
    torch.set_num_threads(plan.threads)
    if plan.device == "cuda":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    else:
        dev = torch.device("cpu")
    dist.init_process_group(plan.backend, init_method=store, rank=rank, world_size=world)
    try:
        mesh = init_device_mesh(dev.type, (world,))
        torch.manual_seed(plan.seed)
        model = build_model(torch, arch, plan.activation_checkpointing).to(dev)
        reshard, _ = SHARDINGS[sharding]
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if plan.dtype == "bf16" else MixedPrecisionPolicy()
        for layer in model.layers:
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        gen = torch.Generator(device="cpu").manual_seed(plan.seed + rank)
        loss_fn = torch.nn.functional.cross_entropy
        batches = {}
        for seq in sorted(plan.seq_lens):
            ids = torch.randint(0, arch.vocab, (plan.micro_batch, seq + 1), generator=gen).to(dev)
            batches[seq] = (ids[:, :-1], ids[:, 1:])

        def step(seq: int) -> tuple[float, float]:
            inp, tgt = batches[seq]
            if turn is not None and rank == 0:
                while not turn[0].acquire(timeout=5.0):
                    if os.getppid() != parent:  # the profiler is gone: do not wait for a turn forever
                        raise RuntimeError(f"rank {rank} of world {world}: the parent process exited")
            dist.barrier()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t0, c0 = time.perf_counter(), time.process_time()
            loss = loss_fn(model(inp).reshape(-1, arch.vocab).float(), tgt.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t1, c1 = time.perf_counter(), time.process_time()
            if turn is not None:
                dist.barrier()  # every rank is done before the next world starts
                if rank == 0:
                    turn[1].release()
            if not math.isfinite(float(loss.detach())):
                raise RuntimeError(f"rank {rank}: non-finite loss at seq_len {seq}")
            return t1 - t0, c1 - c0

        records = {seq: {"wall": [], "process": [], "peak_bytes": 0} for seq in batches}
        for seq in batches:  # ascending: warm-up, the first timed step, and the memory reading
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            for _ in range(plan.warmup):
                step(seq)
            w, c = step(seq)
            records[seq]["wall"].append(w)
            records[seq]["process"].append(c)
            records[seq]["peak_bytes"] = _peak_bytes(torch, dev)
        for rep in range(1, plan.steps):  # the other timed steps: round robin, alternating direction
            for seq in (sorted(batches) if rep % 2 == 0 else sorted(batches, reverse=True)):
                w, c = step(seq)
                records[seq]["wall"].append(w)
                records[seq]["process"].append(c)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, {"rank": rank, "records": records, "params": count_params(model)})
        if rank == 0:
            tmp = out_path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(gathered, fh)
            os.replace(tmp, out_path)
    finally:
        dist.destroy_process_group()


@attrs.frozen
class FsdpProfile:
    observations: list[Observation]
    params: int
    hardware: str
    plan: FsdpPlan


def require_torch():
    return require("torch", "profile-torch", PROFILER)


def check_devices(torch, plan: FsdpPlan) -> None:
    """Refuse a plan the machine cannot run, saying what it needs."""
    if not torch.distributed.is_available():
        raise ValueError(f"torch {torch.__version__} was built without torch.distributed")
    if plan.device == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ValueError(f"--device cuda: torch {torch.__version__} sees no CUDA device; "
                             "use --device cpu (gloo) or run on a GPU machine")
        if max(plan.world_sizes) > n:
            raise ValueError(f"--world-sizes {max(plan.world_sizes)} needs that many GPUs; {n} visible")
        if not torch.distributed.is_nccl_available():
            raise ValueError(f"torch {torch.__version__} has no NCCL backend")
    elif not torch.distributed.is_gloo_available():
        raise ValueError(f"torch {torch.__version__} has no gloo backend")


def _rank_entry(rank: int, world: int, store: str, plan_dict: dict, sharding: str, out_path: str,
                turn: tuple | None, err_path: str) -> None:
    """A rank's process: `_worker`, leaving its traceback in ``err_path`` if it fails."""
    try:
        _worker(rank, world, store, plan_dict, sharding, out_path, turn)
    except BaseException:
        import traceback

        Path(err_path).write_text(traceback.format_exc(), encoding="utf-8")
        raise


def _failure(groups: list) -> str | None:
    """The first failed rank's traceback (or exit code), if any rank of any world has failed."""
    for world, folder, _, procs in groups:
        for rank, proc in enumerate(procs):
            if proc.exitcode not in (None, 0):
                err = Path(folder) / f"error{rank}.txt"
                tail = err.read_text(encoding="utf-8").strip() if err.exists() else f"exit code {proc.exitcode}"
                return f"world={world} rank {rank} failed:\n{tail}"
    return None


def _wait_for(groups: list, done=None, procs=None, poll_s: float = 0.5) -> None:
    """Block until ``done`` is released (or ``procs`` have all exited); raise if a rank fails."""
    while True:
        if done is not None and done.acquire(timeout=poll_s):
            return
        if procs is not None:
            for p in procs:
                p.join(poll_s / max(len(procs), 1))
            if all(p.exitcode is not None for p in procs) and _failure(groups) is None:
                return
        failed = _failure(groups)
        if failed:
            raise RuntimeError(f"{PROFILER}: {failed}")


def _run_worlds(plan: FsdpPlan, sharding: str, worlds: Sequence[int], interleave: bool,
                progress: Callable[[str], None] | None) -> dict[int, list]:
    """Run ``worlds`` (one process per rank); return each world's gathered rank records.

    Interleaved (CPU): every world's ranks start at once and the worlds take turns, one optimizer
    step at a time (world 1 step k, world 2 step k, ..., then step k+1), so a load on the machine
    that comes and goes lands on every world alike instead of on whichever world ran at the time.
    Sequential: one world after another (GPUs: each world needs its own devices).
    """
    import torch.multiprocessing as mp

    ctx = mp.get_context(plan.start_method)
    plan_dict = attrs.asdict(plan)
    n_steps = len(plan.seq_lens) * (plan.warmup + plan.steps)
    with tempfile.TemporaryDirectory(prefix="srl-fsdp-") as tmp:
        groups = []
        for world in worlds:
            folder = Path(tmp) / f"world{world}"
            folder.mkdir()
            turn = (ctx.Semaphore(0), ctx.Semaphore(0)) if interleave else None
            procs = [ctx.Process(target=_rank_entry, daemon=True,
                                 args=(r, world, "file://" + str(folder / "store"), plan_dict, sharding,
                                       str(folder / "records.json"), turn, str(folder / f"error{r}.txt")))
                     for r in range(world)]
            groups.append((world, folder, turn, procs))
        try:
            if interleave:
                if progress:
                    progress(f"{sharding}: {sum(worlds)} ranks of worlds {list(worlds)} ({plan.backend}), "
                             f"taking turns for {n_steps} steps each")
                for g in groups:
                    for p in g[3]:
                        p.start()
                for k in range(n_steps):
                    for _, _, (go, done), _ in groups:
                        go.release()
                        _wait_for(groups, done=done)
                    if progress and (k + 1) % len(plan.seq_lens) == 0:
                        progress(f"  step {k + 1}/{n_steps} of every world done")
                _wait_for(groups, procs=[p for g in groups for p in g[3]])
            else:
                for g in groups:
                    if progress:
                        progress(f"{sharding} world={g[0]}: spawning {g[0]} rank(s) ({plan.backend})")
                    for p in g[3]:
                        p.start()
                    _wait_for(groups, procs=g[3])
            out = {}
            for world, folder, _, _ in groups:
                with open(folder / "records.json", encoding="utf-8") as fh:
                    out[world] = sorted(json.load(fh), key=lambda g: g["rank"])
            return out
        finally:
            for g in groups:
                for p in g[3]:
                    if p.is_alive():
                        p.terminate()
                    if p.pid is not None:
                        p.join()


def profile_fsdp(plan: FsdpPlan, progress: Callable[[str], None] | None = None) -> FsdpProfile:
    """Run every (sharding, world size) of ``plan`` in fresh processes; return the observations."""
    from adapters.provenance import collect

    arch = validate_plan(plan)
    torch = require_torch()
    check_devices(torch, plan)

    if plan.device == "cpu":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # ranks of one host talk over loopback
    dev_name = "cuda:0" if plan.device == "cuda" else "cpu"
    prov = collect(PROFILER, torch=torch, device=dev_name,
                   extra_software={"backend": plan.backend, "fsdp": "torch.distributed.fsdp.fully_shard"})
    interleave = plan.interleaved
    obs: list[Observation] = []
    params = 0
    for sharding in plan.shardings:
        runs = _run_worlds(plan, sharding, sorted(plan.world_sizes), interleave, progress)
        for world, gathered in sorted(runs.items()):
            params = gathered[0]["params"]
            point_prov = {**prov, "model_params": params, "world_size": world,
                          "schedule": "interleaved" if interleave else "sequential"}
            if progress:
                progress(f"{sharding} world={world}:")
            for seq in sorted(plan.seq_lens):
                ranks = [g["records"][str(seq)] for g in gathered]
                pair = point_observations(plan, arch, world, sharding, seq, ranks, point_prov)
                obs.extend(pair)
                if progress:
                    progress(f"  seq_len {seq:>6}: step {pair[0].value * 1e3:9.1f} ms ({plan.clock}), "
                             f"peak {pair[1].value / 2**20:8.1f} MiB")
    return FsdpProfile(obs, params, prov["hardware"], plan)
