"""`srl-profile`: record observations. This module holds the click group and its commands.

`srl-profile import vidur PATH -o obs.jsonl` converts Vidur-format CSVs into observations
(`simrl.cost.vidur_import`). `srl-profile kernels` times one layer's operators with torch
(`adapters.kernels`); `srl-profile kv-probe` reads the KV capacity a vLLM engine allocates
(`adapters.vllm_probe`). Profilers import torch / vllm lazily, inside the command that needs
them, so `--help` and the importers work on the core install. Commands parse, call the domain,
render; user errors leave through `abort()`.
"""

from __future__ import annotations

import collections

import click

from adapters.extras import MissingExtraError
from simrl.cli.app import AppGroup, FiniteFloat, OutputPath, common_options, info, json_option, state, to_json
from simrl.cli.app import abort as _app_abort
from simrl.cost.base import CostModelError
from simrl.cost.observations import ObservationError, write_observations

# integer options: a count (>= 1), a number of untimed calls (>= 0) or a seed, in the 64-bit range
POSITIVE, NONNEG, SEED = click.IntRange(1, 2**31 - 1), click.IntRange(0, 2**31 - 1), click.IntRange(0, 2**63 - 1)

EPILOG = """\b
Examples:
  srl-profile import vidur -o vidur.jsonl      # the Vidur H100 data shipped with simrl
  srl-profile fetch vidur -o vidur-full && srl-profile import vidur vidur-full -o all.jsonl
  srl-profile kernels --model phi-2 --tp 1 --device cpu --tokens 1,16,128 --repeats 3 -o k.jsonl
  srl-profile kernels --model llama-3.1-8b --tp 2 --device cuda -o h100-kernels.jsonl
  srl-profile kv-probe --model Qwen/Qwen3-8B --tp 1 --gpu-memory-utilization 0.9 -o kv.jsonl
  srl-regress fit --family composed --obs k.jsonl -o composed.json

\b
kernels, fsdp and weight-sync need torch (pip install 'simrl[profile-torch]'); vllm and kv-probe
need vLLM and a GPU (pip install 'simrl[profile-vllm]'); megatron needs Megatron-Bridge and GPUs.
third_party/install.sh installs the pinned GPU stack. Schema: docs/observations.md.
"""


def abort(message: str, code: int = 2):
    _app_abort(message, code)


@click.group(cls=AppGroup, epilog=EPILOG)
@common_options
def cli():
    """Record measurements as JSONL observations (schema: docs/observations.md)."""


@cli.group("import")
def import_group():
    """Convert measurements made elsewhere into observations."""


@import_group.command("vidur")
@click.argument("path", type=click.Path(exists=True), required=False)
@click.option("-o", "--output", required=True, type=OutputPath())
@common_options
@json_option
def import_vidur_cmd(path, output, as_json):
    """Convert Vidur compute (mlp.csv) and network (all_reduce / send_recv) CSVs under PATH.

    PATH defaults to the Vidur H100 data shipped with simrl (simrl/cost/data/vidur); a folder
    written by `srl-profile fetch vidur` or a single CSV also works.
    """
    from simrl.cost.vidur_import import import_vidur, vidur_data_dir

    try:
        obs = import_vidur(path if path is not None else vidur_data_dir())
        n = write_observations(output, obs)
    except (ObservationError, ValueError, KeyError, FileNotFoundError) as exc:
        abort(str(exc))
    counts = collections.Counter((o.kind, o.name) for o in obs)
    if as_json:
        click.echo(to_json({"output": output, "observations": n,
                            "counts": [{"kind": k, "name": m, "n": c} for (k, m), c in sorted(counts.items())]}))
        return
    click.echo(f"wrote {n} observations to {output}")
    for (kind, name), c in sorted(counts.items()):
        info(f"  {kind:<10} {name:<26} {c}")


@cli.group("fetch")
def fetch_group():
    """Download published measurement sets."""


@fetch_group.command("vidur")
@click.option("--commit", default=None, help="microsoft/vidur commit, tag or branch [default: the shipped data's]")
@click.option("-o", "--output", required=True, type=OutputPath(directory=True),
              help="folder to create (compute/, network/, traces/, LICENSE, NOTICE, source.json)")
@click.option("--base-url", default=None, hidden=True,
              help="repository URL whose /archive/<commit>.tar.gz is fetched (a mirror)")
@click.option("--timeout", type=FiniteFloat(0, min_open=True), default=120.0, show_default=True, help="seconds per network read")
@common_options
def fetch_vidur_cmd(commit, output, base_url, timeout):
    """Download Vidur's full measurement set (all GPUs and models) at COMMIT from GitHub.

    Only the profiling CSVs, the processed traces and the licence are kept, in the layout of the
    shipped data, so `srl-profile import vidur OUTPUT` reads them. See adapters/vidur_fetch.py.
    """
    from adapters.vidur_fetch import UPSTREAM, FetchError, fetch_vidur
    from simrl.cost.vidur_import import VIDUR_COMMIT

    try:
        res = fetch_vidur(output, commit or VIDUR_COMMIT, base_url or UPSTREAM, timeout=timeout,
                          progress=lambda line: click.echo(line, err=True))
    except (FetchError, ValueError, OSError) as exc:
        abort(str(exc))
    if res.already_present:
        click.echo(f"{output} already holds Vidur {res.commit} ({len(res.files)} files); nothing to do")
        return
    n_mlp = sum(f.endswith("mlp.csv") for f in res.files)
    click.echo(f"wrote {len(res.files)} files of Vidur {res.commit} to {output} "
               f"({n_mlp} mlp.csv; archive sha256 {res.sha256[:16]}...)")


@cli.command("kernels")
@click.option("--model", required=True, help="model of simrl.cost.architectures (HF id or alias, e.g. phi-2)")
@click.option("--tp", type=POSITIVE, default=1, show_default=True, help="tensor-parallel degree (shapes per rank)")
@click.option("--tokens", default=None,
              help="comma-separated num_tokens grid [default: 1,2,4,...,4096 on cuda; 1,2,...,128 on cpu]")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda[:N], or auto (cuda when present)")
@click.option("--repeats", type=POSITIVE, default=None, help="timed repeats per point [default: 20 cuda, 5 cpu]")
@click.option("--warmup", type=NONNEG, default=2, show_default=True, help="untimed calls before the repeats")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True)
@click.option("--threads", type=POSITIVE, default=None, help="torch CPU threads [default: torch's]")
@click.option("--ops", default=None, help="comma-separated subset of operators (default: all of the layer)")
@click.option("-o", "--output", required=True, type=OutputPath())
@common_options
@json_option
def kernels_cmd(model, tp, tokens, device, repeats, warmup, dtype, threads, ops, output, as_json):
    """Time one transformer layer's non-attention operators of MODEL at TP with torch.

    One operator observation per (operator, num_tokens): the median of the repeats, their
    standard deviation, and mean/min/max in provenance.timing. See adapters/kernels.py.
    """
    from adapters.kernels import parse_tokens, profile_kernels
    from adapters.listopt import parse_name_list

    try:
        grid = parse_tokens(tokens) if tokens is not None else None
        op_list = list(parse_name_list(ops, "--ops")) if ops is not None else None
        progress = None if state.quiet else (lambda line: click.echo(line, err=True))
        prof = profile_kernels(model, tp=tp, tokens=grid, device=device, repeats=repeats, warmup=warmup,
                               dtype=dtype, operators=op_list, threads=threads,
                               progress=progress)
        if not prof.observations:
            raise ValueError("no usable timings: " + "; ".join(prof.skipped))
        n = write_observations(output, prof.observations)
    except (MissingExtraError, CostModelError, ObservationError, ValueError) as exc:
        abort(str(exc))
    hw = prof.observations[0].provenance["hardware"] if prof.observations else "?"
    if as_json:
        click.echo(to_json({"output": output, "observations": n, "hardware": hw, "device": prof.device,
                            "dtype": prof.dtype, "skipped": list(prof.skipped)}))
        return
    click.echo(f"wrote {n} operator observations to {output} ({hw}, {prof.device}, {prof.dtype}, "
               f"{prof.repeats} repeats after {prof.warmup} warm-up)")
    if not state.quiet:
        _median_table(prof.observations, prof.tokens)
    for line in prof.skipped:
        info(f"  skipped {line}")


def _median_table(obs, tokens):
    """Median microseconds by operator (rows) and num_tokens (columns)."""
    by = {(o.name, o.inputs["num_tokens"]): o.value for o in obs}
    names = list(dict.fromkeys(o.name for o in obs))
    click.echo("median us".ljust(26) + "".join(f"{t:>10}" for t in tokens))
    for name in names:
        cells = "".join(f"{by[(name, t)] * 1e6:>10.1f}" if (name, t) in by else f"{'-':>10}" for t in tokens)
        click.echo(f"{name:<26}{cells}")


def _observations_json(output: str, observations) -> dict:
    """--json of a measuring command: where the observations went, and each one (SI units)."""
    return {"output": output, "observations": len(observations),
            "records": [{"kind": o.kind, "value": o.value, "unit": o.unit, "inputs": o.inputs} for o in observations]}


@cli.command("fsdp")
@click.option("--model", default="simrl/tiny-llama", show_default=True,
              help="dense model of simrl.cost.architectures, built in code with random weights")
@click.option("--world-sizes", default="1,2", show_default=True, help="comma-separated process counts")
@click.option("--seq-lens", default="64,128,256", show_default=True, help="comma-separated sequence lengths")
@click.option("--sharding", default="full", show_default=True,
              help="comma-separated: full (reshard_after_forward=True, ZeRO-3), grad-op (False, ZeRO-2)")
@click.option("--micro-batch", type=POSITIVE, default=1, show_default=True, help="sequences per rank per step")
@click.option("--steps", type=POSITIVE, default=3, show_default=True, help="timed optimizer steps per point")
@click.option("--warmup", type=NONNEG, default=1, show_default=True, help="untimed steps before them")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="cpu: gloo, one process per rank; cuda: nccl, rank r on cuda:r")
@click.option("--clock", type=click.Choice(["wall", "process"]), default="wall", show_default=True,
              help="wall: step time; process: CPU seconds of each rank (CPU only; ignores waiting)")
@click.option("--threads", type=POSITIVE, default=1, show_default=True, help="torch intra-op threads per rank")
@click.option("--start-method", type=click.Choice(["spawn", "fork", "forkserver"]), default="spawn",
              show_default=True, help="how ranks start (fork: CPU only, skips re-importing torch per rank)")
@click.option("--dtype", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
              help="bf16: FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)")
@click.option("--activation-checkpointing", is_flag=True, help="recompute each decoder layer in backward")
@click.option("--schedule", type=click.Choice(["auto", "interleaved", "sequential"]), default="auto",
              show_default=True, help="interleaved: all worlds' ranks start at once and take turns step by "
              "step, so a passing load hits every world alike (CPU); sequential: one world after another; "
              "auto: interleaved on CPU, sequential on CUDA")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("-o", "--output", required=True, type=OutputPath())
@common_options
@json_option
def fsdp_cmd(model, world_sizes, seq_lens, sharding, micro_batch, steps, warmup, device, clock, threads,
             start_method, dtype, activation_checkpointing, schedule, seed, output, as_json):
    """Time FSDP2 (fully_shard) training steps and peak memory per sharding, world size and length.

    Spawns WORLD processes per point (gloo on CPU, NCCL on GPUs) that train a model built in code;
    writes a time (s) and a memory (bytes) training_step observation per point. Fit them with
    `srl-regress fit --family fsdp`. See adapters/fsdp.py.
    """
    from adapters.fsdp import MAX_WORLD, FsdpPlan, parse_ints, profile_fsdp
    from adapters.listopt import parse_name_list

    try:
        plan = FsdpPlan(model=model, world_sizes=parse_ints(world_sizes, "--world-sizes", MAX_WORLD),
                        seq_lens=parse_ints(seq_lens, "--seq-lens"),
                        shardings=parse_name_list(sharding, "--sharding"),
                        micro_batch=micro_batch, steps=steps, warmup=warmup, device=device, clock=clock,
                        start_method=start_method, threads=threads, dtype=dtype,
                        activation_checkpointing=activation_checkpointing, schedule=schedule, seed=seed)
        prof = profile_fsdp(plan, progress=lambda line: click.echo(line, err=True))
        n = write_observations(output, prof.observations)
    except (MissingExtraError, CostModelError, ObservationError, ValueError) as exc:
        abort(str(exc))
    if as_json:
        click.echo(to_json(_observations_json(output, prof.observations)))
        return
    click.echo(f"wrote {n} training_step observations to {output} ({prof.params:,} parameters, "
               f"{prof.hardware}, {plan.backend}, clock {plan.clock})")
    click.echo(f"{'sharding':<10}{'world':>6}{'seq_len':>9}{'step ms':>12}{'peak MiB':>11}")
    for t, m in zip(prof.observations[::2], prof.observations[1::2], strict=True):
        i = t.inputs
        click.echo(f"{i['sharding']:<10}{i['dp']:>6}{i['seq_lens'][0]:>9}{t.value * 1e3:>12.1f}{m.value / 2**20:>11.1f}")


@cli.command("vllm")
@click.option("--model", required=True, help="Hugging Face id or local path, as vLLM's EngineArgs takes it")
@click.option("--tp", type=POSITIVE, default=1, show_default=True, help="tensor_parallel_size")
@click.option("--scenarios", default="1x512x128,8x512x128,32x512x128,64x128x256,16x2048x64", show_default=True,
              help="comma-separated REQUESTSxPROMPT_LENxOUTPUT_LEN batches, each run to completion")
@click.option("--gpu-memory-utilization", type=FiniteFloat(0, 1, min_open=True), default=None, help="vLLM's (default: vLLM's own)")
@click.option("--max-model-len", type=POSITIVE, default=None, help="vLLM's (default: the model's)")
@click.option("--max-num-seqs", type=POSITIVE, default=None, help="vLLM's scheduler limit (default: vLLM's)")
@click.option("--max-num-batched-tokens", type=POSITIVE, default=None, help="vLLM's token budget per step")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("-o", "--output", required=True, type=OutputPath())
@common_options
@json_option
def vllm_cmd(model, tp, scenarios, gpu_memory_utilization, max_model_len, max_num_seqs, max_num_batched_tokens,
             seed, output, as_json):
    """Drive a vLLM engine with forced-length batches and record every iteration. Needs a GPU.

    One iteration observation per engine step (step time, batch size, prefill / decode tokens,
    KV in use, running and waiting requests) and one kv_probe observation of the capacity.
    Fit them with `srl-regress fit --family psrl` (or distserve). See adapters/vllm_iter.py.
    """
    from adapters.vllm_iter import parse_scenarios, profile_vllm

    try:
        run = profile_vllm(model, parse_scenarios(scenarios), tp=tp, gpu_memory_utilization=gpu_memory_utilization,
                           max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                           max_num_batched_tokens=max_num_batched_tokens, seed=seed,
                           progress=lambda line: click.echo(line, err=True))
        n = write_observations(output, run.observations)
    except (MissingExtraError, ObservationError, ValueError) as exc:
        abort(str(exc))
    if as_json:
        click.echo(to_json(_observations_json(output, run.observations)))
        return
    click.echo(f"wrote {n} observations to {output}: {run.iterations} iterations and a KV capacity of "
               f"{run.kv_capacity_tokens} tokens for {model} at tp={tp}")


@cli.command("weight-sync")
@click.option("--sizes-mb", default="4,16,64", show_default=True, help="comma-separated payload sizes (MiB of bf16)")
@click.option("--instances", default="1,2", show_default=True, help="comma-separated receiver counts")
@click.option("--method", default="broadcast", show_default=True, help="comma-separated: broadcast, filesystem")
@click.option("--bucket-mb", type=FiniteFloat(0, min_open=True), default=16.0, show_default=True, help="bucket size of the transfer")
@click.option("--repeats", type=POSITIVE, default=3, show_default=True)
@click.option("--warmup", type=NONNEG, default=1, show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="cpu: gloo; cuda: NCCL, rank r on cuda:r (instances + 1 GPUs)")
@click.option("--start-method", type=click.Choice(["spawn", "fork", "forkserver"]), default="spawn",
              show_default=True)
@click.option("--dir", "directory", default=None, type=click.Path(file_okay=False),
              help="filesystem method: where the checkpoint is written [default: the temp folder]")
@click.option("-o", "--output", required=True, type=OutputPath())
@common_options
@json_option
def weight_sync_cmd(sizes_mb, instances, method, bucket_mb, repeats, warmup, device, start_method, directory,
                    output, as_json):
    """Time publishing weights from a trainer rank to N instances by broadcast or checkpoint file.

    One weight_sync observation per (method, size, instances). Fit them with
    `srl-regress fit --family weight_sync`. See adapters/weight_sync.py.
    """
    from adapters.fsdp import MAX_WORLD, parse_ints
    from adapters.listopt import parse_name_list, parse_number_list
    from adapters.weight_sync import MiB, SyncPlan, profile_weight_sync

    try:
        sizes = tuple(max(1, int(v * MiB)) for v in parse_number_list(sizes_mb, "--sizes-mb", 1 << 20))
        plan = SyncPlan(sizes_bytes=sizes, instances=parse_ints(instances, "--instances", MAX_WORLD),
                        methods=parse_name_list(method, "--method"), bucket_mb=bucket_mb,
                        repeats=repeats, warmup=warmup, device=device, start_method=start_method,
                        directory=directory)
        prof = profile_weight_sync(plan, progress=lambda line: click.echo(line, err=True))
        n = write_observations(output, prof.observations)
    except (MissingExtraError, ObservationError, ValueError) as exc:
        abort(str(exc))
    if as_json:
        click.echo(to_json(_observations_json(output, prof.observations)))
        return
    click.echo(f"wrote {n} weight_sync observations to {output} ({prof.hardware}, {plan.backend})")
    for o in prof.observations:
        i = o.inputs
        click.echo(f"  {i['method']:<10} {i['bytes'] / MiB:8.1f} MiB -> {i['n_instances']} instance(s) "
                   f"{o.value * 1e3:10.2f} ms")


@cli.command("megatron")
@click.option("--recipe", default="megatron.bridge.recipes.qwen.h100.qwen3:qwen3_8b_pretrain_16gpu_h100_bf16_config",
              show_default=True, help="Megatron-Bridge recipe function (module:function) returning a ConfigContainer")
@click.option("--model", required=True, help="model name recorded in the observations (of simrl.cost.architectures)")
@click.option("--layouts", default="tp1pp1", show_default=True, help="comma-separated tpXppYcpZepW layouts")
@click.option("--seq-lengths", default="2048,4096", show_default=True, help="comma-separated sequence lengths")
@click.option("--micro-batch", type=POSITIVE, default=1, show_default=True)
@click.option("--global-batch", type=POSITIVE, default=None, help="default: micro batch x DP (one micro-batch per rank)")
@click.option("--nproc", type=POSITIVE, default=8, show_default=True, help="GPUs on this node (torchrun --nproc-per-node)")
@click.option("--steps", type=POSITIVE, default=5, show_default=True, help="timed training steps per point")
@click.option("--warmup", type=NONNEG, default=2, show_default=True, help="untimed steps before them")
@click.option("--recompute", type=click.Choice(["none", "full", "selective"]), default=None,
              help="activation recomputation [default: the recipe's]")
@click.option("-o", "--output", required=True, type=OutputPath())
@common_options
@json_option
def megatron_cmd(recipe, model, layouts, seq_lengths, micro_batch, global_batch, nproc, steps, warmup, recompute,
                 output, as_json):
    """Time Megatron-Bridge training steps and peak memory per layout and sequence length. Needs GPUs.

    Runs each (layout, length) under torchrun on this node with mock data and writes a time and a
    memory training_step observation per point, for the hydraulis and analytical families. See
    adapters/megatron.py.
    """
    from adapters.fsdp import parse_ints
    from adapters.megatron import make_point, parse_layouts, profile_megatron

    try:
        points = [make_point(recipe, model, lay, s, micro_batch, global_batch, nproc, steps, warmup, recompute)
                  for lay in parse_layouts(layouts) for s in parse_ints(seq_lengths, "--seq-lengths")]
        obs = profile_megatron(points, progress=lambda line: click.echo(line, err=True))
        n = write_observations(output, obs)
    except (MissingExtraError, ObservationError, ValueError) as exc:
        abort(str(exc))
    if as_json:
        click.echo(to_json(_observations_json(output, obs)))
        return
    click.echo(f"wrote {n} training_step observations to {output}")


@cli.command("kv-probe")
@click.option("--model", required=True, help="Hugging Face id or local path, as vllm.LLM takes it")
@click.option("--tp", type=POSITIVE, default=1, show_default=True, help="tensor_parallel_size")
@click.option("--gpu-memory-utilization", type=FiniteFloat(0, 1, min_open=True), default=None, help="vLLM's (default: vLLM's own)")
@click.option("--max-model-len", type=POSITIVE, default=None, help="vLLM's (default: the model's)")
@click.option("-o", "--output", required=True, type=OutputPath())
@common_options
@json_option
def kv_probe_cmd(model, tp, gpu_memory_utilization, max_model_len, output, as_json):
    """Start a vLLM engine and record the KV-cache capacity (tokens) it allocated. Needs a GPU.

    capacity = num_gpu_blocks x block_size of the engine's cache config. See adapters/vllm_probe.py.
    """
    from adapters.vllm_probe import probe_vllm

    try:
        ob = probe_vllm(model, tp=tp, gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len)
        write_observations(output, [ob])
    except (MissingExtraError, ObservationError, ValueError) as exc:
        abort(str(exc))
    eng = ob.provenance.get("engine", {})
    if as_json:
        click.echo(to_json({"output": output, "kv_capacity_tokens": ob.value, "engine": eng,
                            "hardware": ob.provenance["hardware"]}))
        return
    click.echo(f"wrote 1 kv_probe observation to {output}: {ob.value:.0f} tokens "
               f"({eng.get('num_gpu_blocks')} blocks x {eng.get('block_size')} tokens) "
               f"for {model} at tp={tp} on {ob.provenance['hardware']}")


def main(argv=None):
    cli.main(args=argv, prog_name="srl-profile")


if __name__ == "__main__":
    main()
