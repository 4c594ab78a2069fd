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
from simrl.cli.app import AppGroup, common_options, info, json_option, state, to_json
from simrl.cli.app import abort as _app_abort
from simrl.cost.base import CostModelError
from simrl.cost.observations import ObservationError, write_observations

EPILOG = """\b
Examples:
  srl-profile import vidur path/to/vidur/data -o vidur.jsonl
  srl-profile kernels --model phi-2 --tp 1 --device cpu --tokens 1,16,128 --repeats 3 -o k.jsonl
  srl-profile kernels --model llama-3.1-8b --tp 2 --device cuda -o h100-kernels.jsonl
  srl-profile kv-probe --model Qwen/Qwen3-8B --tp 1 --gpu-memory-utilization 0.9 -o kv.jsonl
  srl-regress fit --family composed --obs k.jsonl -o composed.json

\b
kernels needs torch (pip install 'simrl[profile-torch]'); kv-probe needs vLLM and a GPU
(pip install 'simrl[profile-vllm]'). Schema: docs/observations.md.
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
@click.argument("path", type=click.Path(exists=True))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@common_options
@json_option
def import_vidur_cmd(path, output, as_json):
    """Convert Vidur compute (mlp.csv) and network (all_reduce / send_recv) CSVs under PATH."""
    from simrl.cost.vidur_import import import_vidur

    try:
        obs = import_vidur(path)
        n = write_observations(output, obs)
    except (ObservationError, ValueError, KeyError) as exc:
        abort(str(exc))
    counts = collections.Counter((o.kind, o.name) for o in obs)
    if as_json:
        click.echo(to_json({"output": output, "observations": n,
                            "counts": [{"kind": k, "name": m, "n": c} for (k, m), c in sorted(counts.items())]}))
        return
    click.echo(f"wrote {n} observations to {output}")
    for (kind, name), c in sorted(counts.items()):
        info(f"  {kind:<10} {name:<26} {c}")


@cli.command("kernels")
@click.option("--model", required=True, help="model of simrl.cost.architectures (HF id or alias, e.g. phi-2)")
@click.option("--tp", type=int, default=1, show_default=True, help="tensor-parallel degree (shapes per rank)")
@click.option("--tokens", default=None,
              help="comma-separated num_tokens grid [default: 1,2,4,...,4096 on cuda; 1,2,...,128 on cpu]")
@click.option("--device", default="auto", show_default=True, help="cpu, cuda[:N], or auto (cuda when present)")
@click.option("--repeats", type=int, default=None, help="timed repeats per point [default: 20 cuda, 5 cpu]")
@click.option("--warmup", type=int, default=2, show_default=True, help="untimed calls before the repeats")
@click.option("--dtype", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True)
@click.option("--threads", type=int, default=None, help="torch CPU threads [default: torch's]")
@click.option("--ops", default=None, help="comma-separated subset of operators (default: all of the layer)")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@common_options
@json_option
def kernels_cmd(model, tp, tokens, device, repeats, warmup, dtype, threads, ops, output, as_json):
    """Time one transformer layer's non-attention operators of MODEL at TP with torch.

    One operator observation per (operator, num_tokens): the median of the repeats, their
    standard deviation, and mean/min/max in provenance.timing. See adapters/kernels.py.
    """
    from adapters.kernels import parse_tokens, profile_kernels

    try:
        grid = parse_tokens(tokens) if tokens else None
        op_list = [o.strip() for o in ops.split(",") if o.strip()] if ops else None
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


@cli.command("kv-probe")
@click.option("--model", required=True, help="Hugging Face id or local path, as vllm.LLM takes it")
@click.option("--tp", type=int, default=1, show_default=True, help="tensor_parallel_size")
@click.option("--gpu-memory-utilization", type=float, default=None, help="vLLM's (default: vLLM's own)")
@click.option("--max-model-len", type=int, default=None, help="vLLM's (default: the model's)")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
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
