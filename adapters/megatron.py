"""`srl-profile megatron`: training-step time and peak memory per layout through Megatron-Bridge.

Checked against Megatron-Bridge v0.6.0 (commit 51885cf132b2814188b6855c25a8588254274c2a,
third_party/pins.json), files ``src/megatron/bridge/training/pretrain.py`` (``pretrain(config,
forward_step_func, callbacks=None)``), ``training/callbacks.py`` (``Callback`` with
``on_train_step_start`` / ``on_train_step_end(context)``, fired every step by ``training/train.py``),
``training/gpt_step.py`` (``forward_step``), ``recipes/common.py`` (recipes build a
``ConfigContainer`` whose ``dataset`` is a ``GPTDatasetConfig`` with ``blend=None``: mock data) and
``recipes/qwen/h100/qwen3.py`` (``cfg.model.tensor_model_parallel_size``,
``pipeline_model_parallel_size``, ``context_parallel_size``, ``expert_model_parallel_size``,
``sequence_parallel``, ``recompute_granularity``; ``cfg.train.train_iters``, ``micro_batch_size``,
``global_batch_size``; ``cfg.ddp.use_distributed_optimizer``).

For each layout (TP, PP, CP, EP) and sequence length the profiler starts ``torchrun --standalone
--nproc-per-node N -m adapters.megatron RUN.json`` on this node. Every rank takes the recipe's
config, applies the overrides below, and calls ``pretrain`` with ``gpt_step.forward_step`` and a
step-timer callback: on ``on_train_step_start`` it synchronises CUDA, resets the allocator's peak
and reads ``time.perf_counter``; on ``on_train_step_end`` it synchronises and reads the clock and
``torch.cuda.max_memory_allocated``. Rank 0 gathers every rank's readings and writes them. A step
is as long as its slowest rank; memory is the largest rank's peak. The first ``--warmup`` steps
are dropped; value = median of the rest. Each point gives a time (s) and a memory (bytes)
``training_step`` observation with ``seq_lens`` = the global batch's sequences, ``tp``, ``pp``,
``dp`` (= N / (TP x PP x CP)), ``cp``, ``ep``, ``zero_stage`` (1 with Megatron's distributed
optimizer, else 0) and ``activation_checkpointing``, which the ``hydraulis`` and ``analytical``
training families read.

**Needs NVIDIA GPUs and Megatron-Bridge** (third_party/install.sh); it has not been run in this
repository's development environment. The override arithmetic, the timer callback, the launch
command and the observation assembly are tested with a fake ``pretrain``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from adapters.extras import MissingExtraError
from simrl.cost.observations import Observation, make

PROFILER = "srl-profile megatron"
DEFAULT_RECIPE = "megatron.bridge.recipes.qwen.h100.qwen3:qwen3_8b_pretrain_16gpu_h100_bf16_config"


@attrs.frozen
class Layout:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1

    def dp(self, nproc: int) -> int:
        model_parallel = self.tp * self.pp * self.cp
        if nproc % model_parallel:
            raise ValueError(f"{self}: {nproc} GPUs do not divide into TP x PP x CP = {model_parallel}")
        dp = nproc // model_parallel
        if (dp * self.cp) % self.ep:
            raise ValueError(f"{self}: EP {self.ep} must divide DP x CP = {dp * self.cp}")
        return dp

    @property
    def name(self) -> str:
        return f"tp{self.tp}pp{self.pp}cp{self.cp}ep{self.ep}"


def parse_layouts(text: str) -> list[Layout]:
    """``"tp2pp1,tp1pp2cp2"`` -> layouts (missing degrees are 1)."""
    import re

    from adapters.listopt import split_items

    out = []
    for item in (t.lower() for t in split_items(text, "--layouts", "comma-separated layouts like tp2pp1cp1ep1")):
        parts = re.findall(r"(tp|pp|cp|ep)(\d+)", item)
        if not parts or "".join(f"{k}{v}" for k, v in parts) != item:
            raise ValueError(f"--layouts: {item!r} is not like tp2pp1cp1ep1")
        vals = {k: int(v) for k, v in parts}
        if any(not 1 <= v <= 4096 for v in vals.values()) or len(vals) != len(parts):
            raise ValueError(f"--layouts: {item!r}: each degree once, in [1, 4096]")
        out.append(Layout(**vals))
    if not out:
        raise ValueError("--layouts: no layout given")
    return out


@attrs.frozen
class Point:
    """One measured configuration."""

    recipe: str
    model: str
    layout: Layout
    seq_length: int
    micro_batch: int
    global_batch: int
    nproc: int
    steps: int
    warmup: int
    recompute: str | None = None  # None keeps the recipe's; "none" turns recomputation off

    @property
    def train_iters(self) -> int:
        return self.warmup + self.steps


def make_point(recipe: str, model: str, layout: Layout, seq_length: int, micro_batch: int, global_batch: int | None,
               nproc: int, steps: int, warmup: int, recompute: str | None = None) -> Point:
    dp = layout.dp(nproc)
    gb = global_batch if global_batch is not None else micro_batch * dp
    if gb % (micro_batch * dp):
        raise ValueError(f"--global-batch {gb} must be a multiple of micro batch x DP = {micro_batch * dp}")
    if seq_length < 1 or micro_batch < 1 or steps < 1 or warmup < 0:
        raise ValueError("--seq-lengths, --micro-batch and --steps must be >= 1, --warmup >= 0")
    if layout.cp > 1 and seq_length % (2 * layout.cp):
        raise ValueError(f"{layout.name}: seq_length {seq_length} must be a multiple of 2 x CP")
    if recompute not in (None, "none", "full", "selective"):
        raise ValueError(f"--recompute expects none, full or selective, got {recompute!r}")
    return Point(recipe, model, layout, seq_length, micro_batch, gb, nproc, steps, warmup, recompute)


def config_overrides(p: Point) -> dict[str, Any]:
    """Dotted ConfigContainer paths -> values for one point."""
    ov: dict[str, Any] = {
        "model.tensor_model_parallel_size": p.layout.tp,
        "model.pipeline_model_parallel_size": p.layout.pp,
        "model.context_parallel_size": p.layout.cp,
        "model.expert_model_parallel_size": p.layout.ep,
        "model.sequence_parallel": p.layout.tp > 1,
        "model.seq_length": p.seq_length,
        "dataset.seq_length": p.seq_length,
        "train.micro_batch_size": p.micro_batch,
        "train.global_batch_size": p.global_batch,
        "train.train_iters": p.train_iters,
        "train.eval_iters": 0,
        "scheduler.lr_warmup_iters": 0,
        "scheduler.lr_decay_iters": p.train_iters,
        "checkpoint.save": None,
        "checkpoint.load": None,
        "logger.log_interval": max(p.train_iters, 1),
    }
    if p.layout.pp == 1:
        ov["model.virtual_pipeline_model_parallel_size"] = None
    if p.recompute is not None:
        ov["model.recompute_granularity"] = None if p.recompute == "none" else p.recompute
        if p.recompute == "full":
            ov["model.recompute_method"] = "uniform"
            ov["model.recompute_num_layers"] = 1
    return ov


def apply_overrides(cfg: Any, overrides: dict[str, Any]) -> None:
    """Set each dotted path on ``cfg``; a path whose parent does not exist is an error naming it."""
    for path, val in overrides.items():
        obj = cfg
        *parents, leaf = path.split(".")
        for part in parents:
            if not hasattr(obj, part) or getattr(obj, part) is None:
                raise ValueError(f"recipe config has no {path!r} (missing {part!r})")
            obj = getattr(obj, part)
        setattr(obj, leaf, val)


class StepTimer:
    """Megatron-Bridge callback (duck-typed ``Callback``): per-step time and peak memory."""

    def __init__(self, sync: Callable[[], None], reset_peak: Callable[[], None], peak: Callable[[], int]):
        self.sync, self.reset_peak, self.peak = sync, reset_peak, peak
        self.times: list[float] = []
        self.peaks: list[int] = []
        self._t0 = 0.0

    def on_train_step_start(self, context=None) -> None:
        self.sync()
        self.reset_peak()
        self._t0 = time.perf_counter()

    def on_train_step_end(self, context=None) -> None:
        self.sync()
        self.times.append(time.perf_counter() - self._t0)
        self.peaks.append(int(self.peak()))

    def __getattr__(self, name):  # every other Callback event is a no-op
        if name.startswith("on_"):
            return lambda *a, **k: None
        raise AttributeError(name)


def point_observations(p: Point, ranks: Sequence[dict], provenance: dict) -> list[Observation]:
    """``ranks[r]`` = {"times": [...], "peaks": [...], "distributed_optimizer": bool, "recompute": str|None}."""
    if len(ranks) != p.nproc:
        raise ValueError(f"{p.layout.name}: expected {p.nproc} rank records, got {len(ranks)}")
    times = np.array([r["times"] for r in ranks], float)
    if times.ndim != 2 or times.shape[1] != p.train_iters:
        raise ValueError(f"{p.layout.name}: expected {p.train_iters} step times per rank, got {times.shape}")
    step = times.max(axis=0)[p.warmup:]
    peak = int(max(max(r["peaks"][p.warmup:]) for r in ranks))
    r0 = ranks[0]
    inputs = {
        "seq_lens": [p.seq_length] * p.global_batch,
        "tp": p.layout.tp, "pp": p.layout.pp, "dp": p.layout.dp(p.nproc), "cp": p.layout.cp, "ep": p.layout.ep,
        "model": p.model,
        "zero_stage": 1 if r0.get("distributed_optimizer") else 0,
        "activation_checkpointing": r0.get("recompute") not in (None, "none"),
        "micro_batch": p.micro_batch, "global_batch": p.global_batch,
        "framework": "megatron-bridge", "recipe": p.recipe,
    }
    prov = {**provenance, "timing": {"steps": [float(x) for x in step], "warmup": p.warmup, "unit": "s",
                                     "clock": "perf_counter between cuda-synchronised step callbacks",
                                     "median": float(np.median(step)), "std": float(step.std())}}
    return [make("training_step", float(np.median(step)), "s", inputs, prov, spread=float(step.std())),
            make("training_step", float(peak), "bytes", dict(inputs),
                 {**provenance, "memory": {"reading": "torch.cuda.max_memory_allocated", "max_over_ranks": True}})]


def resolve_recipe(recipe: str) -> Callable[[], Any]:
    mod, _, fn = recipe.replace(":", ".").rpartition(".")
    try:
        return getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--recipe {recipe!r}: cannot import ({exc})") from exc


def run_rank(p: Point, pretrain: Callable, forward_step: Callable, recipe_fn: Callable, timer: StepTimer) -> dict:
    """The body each rank runs: config, overrides, pretrain with the timer. Returns the rank's record."""
    cfg = recipe_fn()
    apply_overrides(cfg, config_overrides(p))
    pretrain(cfg, forward_step, callbacks=[timer])
    return {"times": timer.times, "peaks": timer.peaks,
            "distributed_optimizer": bool(getattr(getattr(cfg, "ddp", None), "use_distributed_optimizer", False)),
            "recompute": getattr(cfg.model, "recompute_granularity", None)}


def launch_command(p: Point, run_file: str, torchrun: str = "torchrun") -> list[str]:
    return [torchrun, "--standalone", f"--nproc-per-node={p.nproc}", "-m", "adapters.megatron", run_file]


def require_gpus(nproc: int):
    try:
        import torch
    except ImportError as exc:
        raise MissingExtraError(f"{PROFILER} needs torch and Megatron-Bridge: pip install "
                                "'simrl[profile-megatron]' or third_party/install.sh") from exc
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < nproc:
        raise MissingExtraError(f"{PROFILER} trains with Megatron-Bridge on NVIDIA GPUs: --nproc {nproc} needs "
                                f"{nproc} visible GPUs, torch {torch.__version__} sees {n}")
    if importlib.util.find_spec("megatron.bridge") is None:
        raise MissingExtraError(f"{PROFILER} needs Megatron-Bridge (megatron.bridge is not importable): "
                                "third_party/install.sh --editable, or pip install 'simrl[profile-megatron]'")
    return torch


def profile_megatron(points: Sequence[Point], progress: Callable[[str], None] | None = None,
                     runner: Callable[[list[str]], None] | None = None) -> list[Observation]:
    """Run each point under torchrun on this node. ``runner`` (tests) replaces the subprocess."""
    from adapters.provenance import collect

    torch = None
    if runner is None:
        torch = require_gpus(max(p.nproc for p in points))
        runner = lambda cmd: subprocess.run(cmd, check=True)  # noqa: E731
    prov = collect(PROFILER, torch=torch, device="cuda:0" if torch is not None else None,
                   extra_software={"megatron_bridge": _version("megatron-bridge"),
                                   "megatron_core": _version("megatron-core")})
    obs: list[Observation] = []
    for p in points:
        with tempfile.TemporaryDirectory(prefix="srl-megatron-") as tmp:
            run_file, out = str(Path(tmp) / "run.json"), str(Path(tmp) / "ranks.json")
            Path(run_file).write_text(json.dumps({"point": attrs.asdict(p), "out": out}), encoding="utf-8")
            if progress:
                progress(f"{p.layout.name} seq {p.seq_length}: " + " ".join(launch_command(p, run_file)))
            runner(launch_command(p, run_file))
            ranks = json.loads(Path(out).read_text(encoding="utf-8"))
        pair = point_observations(p, ranks, prov)
        obs.extend(pair)
        if progress:
            progress(f"  step {pair[0].value * 1e3:.1f} ms, peak {pair[1].value / 2**30:.2f} GiB")
    return obs


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # noqa: BLE001 - not installed
        return "not installed"


def point_from_dict(d: dict) -> Point:
    return Point(**{**d, "layout": Layout(**d["layout"])})


def _main(run_file: str) -> None:  # pragma: no cover - runs under torchrun on GPUs
    """Entry of each torchrun rank: measure, gather to rank 0, write."""
    import torch
    import torch.distributed as dist
    from megatron.bridge.training.gpt_step import forward_step
    from megatron.bridge.training.pretrain import pretrain

    spec = json.loads(Path(run_file).read_text(encoding="utf-8"))
    p = point_from_dict(spec["point"])
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    timer = StepTimer(lambda: torch.cuda.synchronize(dev), lambda: torch.cuda.reset_peak_memory_stats(dev),
                      lambda: torch.cuda.max_memory_allocated(dev))
    rec = run_rank(p, pretrain, forward_step, resolve_recipe(p.recipe), timer)
    if not dist.is_initialized():
        raise RuntimeError("pretrain returned without an initialised process group")
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, rec)
    if dist.get_rank() == 0:
        Path(spec["out"]).write_text(json.dumps(gathered), encoding="utf-8")


if __name__ == "__main__":  # pragma: no cover
    _main(sys.argv[1])
