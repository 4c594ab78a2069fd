"""The `bench` command. Each command parses, calls the domain, renders; user errors leave via `abort`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click

from harness import pins as P
from harness import plan as plan_mod
from harness import recipes
from harness.errors import BenchError


def abort(msg: str, code: int = 1):
    click.echo(f"error: {msg}", err=True)
    sys.exit(code)


class _Group(click.Group):
    """Turns every BenchError raised by a command into a one-line message and its exit code."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BenchError as exc:
            abort(str(exc), exc.exit_code)
        except KeyboardInterrupt:  # between runs of a suite; a run itself turns signals into `aborted`
            abort("interrupted", 130)


@click.group(cls=_Group)
def main() -> None:
    """RL Systems Bench: ART and SkyRL native async pipelines on four GPUs."""


@main.command("plan")
@click.option("--suite", default="comparison", show_default=True)
def plan_cmd(suite: str) -> None:
    """Print the suite's runs in order."""
    runs = plan_mod.plan(suite)
    click.echo(f"suite {suite}: {len(runs)} runs, serial, stop on first failure")
    click.echo(f"model {P.MODEL}@{P.MODEL_REVISION[:12]} {P.DTYPE}, LoRA rank 8 alpha {P.LORA_ALPHA}; "
               f"{P.WARMUP_UPDATES} warmup + {P.MEASURED_UPDATES} measured updates, headline c15..c20")
    for i, (backend, workload) in enumerate(runs, 1):
        s = P.pipeline_settings(backend)
        par = s["parallel"]
        click.echo(f"{i:2d}. {backend:5s} {workload:17s} B{s['groups_per_update']} workers{s['workers']} "
                   f"staleness{s['staleness_bound']} TP{par['tp']} CP{par['cp']} EP{par['ep']} DP{par['dp']}")


@main.command("gpus")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def gpus_cmd(state_dir: str | None, as_json: bool) -> None:
    """GPUs with memory, compute processes, and lease holders (with liveness)."""
    from harness.inventory import inventory
    from harness.lease import LeaseStore

    rows = inventory(LeaseStore(Path(state_dir) if state_dir else None))
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    click.echo(f"{'IDX':>3}  {'UUID':40s}  {'NAME':14s}  {'MEM MiB':>15s}  {'PROCS':>5s}  LEASE")
    for r in rows:
        mem = f"{r.get('memory_used_mib')}/{r.get('memory_total_mib')}"
        lease = r["lease"]
        held = "free" if lease is None else (f"{lease['lease_id']} run {lease['run_id']} pid {lease['pid']}"
                                             f"@{lease['host']} holder {lease['holder']}")
        idx = "-" if r["index"] is None else str(r["index"])
        click.echo(f"{idx:>3}  {r['uuid']:40s}  {r['name'][:14]:14s}  {mem:>15s}  {len(r['processes']):>5d}  {held}")
        for p in r["processes"]:
            click.echo(f"{'':5s}pid {p['pid']} {p['process_name'] or '[unknown]'} {p['used_memory_mib']} MiB")


@main.command("build")
@click.option("--backend", type=click.Choice(P.BACKENDS), required=True)
@click.option("--engine", default="docker", show_default=True)
def build_cmd(backend: str, engine: str) -> None:
    """Build containers/<backend>.Dockerfile with the benchmark-Python and recipe hashes baked in."""
    cmd = recipes.build_command(backend, engine=engine)
    shown = " ".join(cmd)
    problem = recipes.engine_problem(engine)
    if problem:
        click.echo(f"cannot build here: {problem}.", err=True)
        click.echo(f"On a host with {engine} and the NVIDIA Container Toolkit, run from {recipes.ROOT}:", err=True)
        click.echo(shown)
        sys.exit(2)
    click.echo(f"$ {shown}")
    rc = subprocess.run(cmd, cwd=recipes.ROOT, check=False).returncode
    if rc != 0:
        abort(f"{engine} build failed with exit code {rc}")
    click.echo(f"built {recipes.image_tag(backend)}")


@main.command("run")
@click.option("--suite", default=None, help="run a whole suite (comparison) serially")
@click.option("--backend", type=click.Choice(P.BACKENDS), default=None)
@click.option("--workload", type=click.Choice(P.WORKLOADS), default=None)
@click.option("--gpus", required=True, help="four host GPU indices or exact UUIDs, comma separated")
@click.option("--runtime", type=click.Choice(P.RUNTIMES), default="container", show_default=True)
@click.option("--python", "python_", default=None, help="backend interpreter (native runtime)")
@click.option("--skyrl-source", default=None, type=click.Path(file_okay=False))
@click.option("--hf-cache", default=None, type=click.Path(file_okay=False), help="HF_HOME containing hub/")
@click.option("--rank", type=click.Choice(["8", "1"]), default="8", show_default=True)
@click.option("--skyrl-batch-size", type=click.Choice(["4", "1"]), default="4", show_default=True)
@click.option("--skyrl-cuda-compat", is_flag=True)
@click.option("--image", default=None, help="container image (default: the tag `bench build` makes)")
@click.option("--results-dir", default="results", show_default=True, type=click.Path(file_okay=False))
@click.option("--state-dir", default=None, type=click.Path(file_okay=False))
@click.option("--seed", default=P.DEFAULT_SEED, show_default=True, type=int)
def run_cmd(suite, backend, workload, gpus, runtime, python_, skyrl_source, hf_cache, rank, skyrl_batch_size,
            skyrl_cuda_compat, image, results_dir, state_dir, seed) -> None:
    """Run one benchmark, or a suite; each run gets a fresh results/<run-id>/."""
    from harness.run import RunRequest, run_one, run_suite

    if suite and (backend or workload):
        abort("--suite runs every backend and workload; drop --backend/--workload")
    if not suite and not (backend and workload):
        abort("give --suite comparison, or both --backend and --workload")
    req = RunRequest(backend=backend or "art", workload=workload or "multi_turn", gpus=gpus, runtime=runtime,
                     python=python_, skyrl_source=skyrl_source, hf_cache=hf_cache, rank=int(rank),
                     skyrl_batch_size=int(skyrl_batch_size), skyrl_cuda_compat=skyrl_cuda_compat,
                     results_dir=results_dir, state_dir=state_dir, seed=seed, suite=suite, image=image,
                     argv=tuple(["bench", *sys.argv[1:]]))
    echo = click.echo
    if suite:
        done = run_suite(req, echo)
        ok = len(done) == len(plan_mod.plan(suite)) and all(m["status"] == "valid" for _, m in done)
        click.echo(f"suite {suite}: {sum(m['status'] == 'valid' for _, m in done)}/{len(plan_mod.plan(suite))} valid")
        if ok:
            click.echo("compare with: bench report " + " ".join(str(d) for d, _ in done))
        sys.exit(0 if ok else _exit_code([m for _, m in done]))
    _, man = run_one(req, echo)
    sys.exit(0 if man["status"] == "valid" else _exit_code([man]))


def _exit_code(manifests: list[dict]) -> int:
    """130 when a signal interrupted the last run (as a shell reports Ctrl-C), else 1."""
    last = manifests[-1] if manifests else {}
    return 130 if any(r.startswith("interrupted by") for r in last.get("reasons", [])) else 1


@main.command("validate")
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
def validate_cmd(results_dir: str) -> None:
    """Re-run every validation check on a results directory; exit 0 only when VALID."""
    from harness.validate import validate_or_error

    verdict = validate_or_error(Path(results_dir))
    for c in verdict["checks"]:
        click.echo(f"{'PASS' if c['passed'] else 'FAIL'}  {c['check']:20s} {c['detail']}")
    click.echo(verdict["verdict"])
    sys.exit(0 if verdict["verdict"] == "VALID" else 1)


@main.command("report")
@click.argument("results_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--output", default=None, type=click.Path(dir_okay=False), help="also write the table here")
def report_cmd(results_dirs, output) -> None:
    """Comparison table (markdown) of headline and trainer rates; rank 1 in its own table."""
    from harness.fsio import write_atomic
    from harness.report import comparison_markdown, load_summaries

    text = comparison_markdown(load_summaries([Path(d) for d in results_dirs]))
    click.echo(text, nl=False)
    if output:
        write_atomic(Path(output), text)


@main.command("release")
@click.option("--lease-id", required=True)
@click.option("--force", is_flag=True, help="required: breaks the lease whatever its holder's state")
@click.option("--reason", default="manual release", show_default=True)
@click.option("--state-dir", default=None, type=click.Path(file_okay=False))
def release_cmd(lease_id: str, force: bool, reason: str, state_dir: str | None) -> None:
    """Break a lease by id (logged). Inspect its run and processes with `bench gpus` first."""
    from harness.lease import LeaseStore

    if not force:
        abort("refusing to release without --force; check the holder with `bench gpus` first "
              "(there is no automatic stale-lease override)")
    freed = LeaseStore(Path(state_dir) if state_dir else None).release(lease_id, force=True, reason=reason)
    click.echo(f"released lease {lease_id}: {', '.join(freed)} (logged in reservations.jsonl)")


@main.command("k8s", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
def k8s_cmd(ctx) -> None:
    """Qualify an image on Kubernetes (same flags as scripts/qualify_kubernetes.py)."""
    from harness.k8s_cli import main as k8s_main

    k8s_main.main(args=list(ctx.args), prog_name="bench k8s", standalone_mode=True)


if __name__ == "__main__":
    main(prog_name="bench")
