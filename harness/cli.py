"""The `bench` command. Each command parses, calls the domain, renders; user errors leave via `abort`.

It is an app of `simrl.cli.app` (docs/cli.md): ``-h``, ``-q/-v``, ``--json``, ``-o``, and the
exit codes 0 ok, 1 result negative (a run or results directory judged INVALID / ABORTED),
2 user error (a `BenchError`: bad flag, stale image, unknown lease), 3 a requested GPU is
leased by another run, 4 a requested GPU is busy, 130/143 interrupted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from harness import pins as P
from harness import plan as plan_mod
from harness import recipes
from harness.errors import BenchError
from simrl.cli.app import EXIT_USAGE, AppGroup, common_options, info, json_option, state, to_json
from simrl.cli.app import abort as _app_abort


def abort(msg: str, code: int = EXIT_USAGE):
    _app_abort(msg, code)


def _code(exc: BenchError) -> int:
    """A BenchError's exit code on the common table: its generic code 1 is a user error (2)."""
    return EXIT_USAGE if exc.exit_code == 1 else exc.exit_code


class _Group(AppGroup):
    """Turns every BenchError raised by a command into a one-line message and its exit code."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BenchError as exc:
            abort(str(exc), _code(exc))


EPILOG = """\b
Examples:
  bench plan                                   # the comparison suite's runs
  bench gpus --json                            # GPUs, processes, leases as JSON
  bench run --backend art --workload multi_turn --gpus 0,1,2,3 -o results
  bench validate results/<run-id>              # exit 0 only when VALID
  bench report results/* -o comparison.md
"""


@click.group(cls=_Group, epilog=EPILOG)
@common_options
def main() -> None:
    """RL Systems Bench: ART and SkyRL native async pipelines on four GPUs."""


@main.command("plan")
@click.option("--suite", default="comparison", show_default=True)
@common_options
@json_option
def plan_cmd(suite: str, as_json: bool) -> None:
    """Print the suite's runs in order."""
    runs = plan_mod.plan(suite)
    if as_json:
        click.echo(to_json({"suite": suite, "runs": [
            {"backend": b, "workload": w, "settings": P.pipeline_settings(b)} for b, w in runs]}))
        return
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
@common_options
@json_option
def gpus_cmd(state_dir: str | None, as_json: bool) -> None:
    """GPUs with memory, compute processes, and lease holders (with liveness)."""
    from harness.inventory import inventory
    from harness.lease import LeaseStore

    rows = inventory(LeaseStore(Path(state_dir) if state_dir else None))
    if as_json:
        click.echo(to_json(rows))
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
@common_options
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
@click.option("-o", "--output", "--results-dir", "results_dir", default="results", show_default=True,
              type=click.Path(file_okay=False), help="directory each run's results/<run-id>/ goes into")
@click.option("--state-dir", default=None, type=click.Path(file_okay=False))
@click.option("--seed", default=P.DEFAULT_SEED, show_default=True, type=int)
@common_options
@json_option
def run_cmd(suite, backend, workload, gpus, runtime, python_, skyrl_source, hf_cache, rank, skyrl_batch_size,
            skyrl_cuda_compat, image, results_dir, state_dir, seed, as_json) -> None:
    """Run one benchmark, or a suite; each run gets a fresh results/<run-id>/."""
    from harness.run import RunRequest, run_one, run_suite

    if suite and (backend or workload):
        abort("--suite runs every backend and workload; drop --backend/--workload")
    if not suite and not (backend and workload):
        abort("give --suite comparison, or both --backend and --workload")
    from harness import nvsmi

    try:
        nvsmi.check_spec(gpus)  # a typo in --gpus is a usage error, not an aborted results directory
    except BenchError as exc:
        abort(str(exc))
    req = RunRequest(backend=backend or "art", workload=workload or "multi_turn", gpus=gpus, runtime=runtime,
                     python=python_, skyrl_source=skyrl_source, hf_cache=hf_cache, rank=int(rank),
                     skyrl_batch_size=int(skyrl_batch_size), skyrl_cuda_compat=skyrl_cuda_compat,
                     results_dir=results_dir, state_dir=state_dir, seed=seed, suite=suite, image=image,
                     argv=tuple(["bench", *sys.argv[1:]]))
    echo = (lambda line: info(line, err=True)) if as_json else info
    if suite:
        done = run_suite(req, echo)
        ok = len(done) == len(plan_mod.plan(suite)) and all(m["status"] == "valid" for _, m in done)
        if as_json:
            click.echo(to_json({"suite": suite, "runs": [{"results_dir": str(d), "status": m["status"],
                                                          "reasons": m.get("reasons", [])} for d, m in done]}))
        else:
            click.echo(f"suite {suite}: {sum(m['status'] == 'valid' for _, m in done)}/"
                       f"{len(plan_mod.plan(suite))} valid")
            if ok:
                click.echo("compare with: bench report " + " ".join(str(d) for d, _ in done))
        sys.exit(0 if ok else _exit_code([m for _, m in done]))
    d, man = run_one(req, echo)
    if as_json:
        click.echo(to_json({"results_dir": str(d), "status": man["status"], "reasons": man.get("reasons", [])}))
    sys.exit(0 if man["status"] == "valid" else _exit_code([man]))


def _exit_code(manifests: list[dict]) -> int:
    """130 when a signal interrupted the last run (as a shell reports Ctrl-C), else 1."""
    last = manifests[-1] if manifests else {}
    return 130 if any(r.startswith("interrupted by") for r in last.get("reasons", [])) else 1


@main.command("validate")
@click.argument("results_dir", type=click.Path(exists=True, file_okay=False))
@common_options
@json_option
def validate_cmd(results_dir: str, as_json: bool) -> None:
    """Re-run every validation check on a results directory; exit 0 only when VALID (else 1)."""
    from harness.validate import validate_or_error

    verdict = validate_or_error(Path(results_dir))
    if as_json:
        click.echo(to_json(verdict))
        sys.exit(0 if verdict["verdict"] == "VALID" else 1)
    for c in verdict["checks"]:
        if state.quiet and c["passed"]:
            continue
        click.echo(f"{'PASS' if c['passed'] else 'FAIL'}  {c['check']:20s} {c['detail']}")
    click.echo(verdict["verdict"])
    sys.exit(0 if verdict["verdict"] == "VALID" else 1)


@main.command("report")
@click.argument("results_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False), help="also write the table here")
@common_options
@json_option
def report_cmd(results_dirs, output, as_json) -> None:
    """Comparison table (markdown) of headline and trainer rates; rank 1 in its own table."""
    from harness.fsio import write_atomic
    from harness.report import comparison_markdown, load_summaries
    from simrl.cli.app import OutputError, check_output_file

    if output:
        try:
            check_output_file(output)
        except OutputError as exc:
            abort(str(exc))
    summaries = load_summaries([Path(d) for d in results_dirs])
    text = comparison_markdown(summaries)
    if as_json:
        click.echo(to_json(summaries))
    else:
        click.echo(text, nl=False)
    if output:
        write_atomic(Path(output), text)


@main.command("release")
@click.option("--lease-id", required=True)
@click.option("--force", is_flag=True, help="required: breaks the lease whatever its holder's state")
@click.option("--reason", default="manual release", show_default=True)
@click.option("--state-dir", default=None, type=click.Path(file_okay=False))
@common_options
def release_cmd(lease_id: str, force: bool, reason: str, state_dir: str | None) -> None:
    """Break a lease by id (logged). Inspect its run and processes with `bench gpus` first."""
    from harness.lease import LeaseStore

    if not force:
        abort("refusing to release without --force; check the holder with `bench gpus` first "
              "(there is no automatic stale-lease override)")
    freed = LeaseStore(Path(state_dir) if state_dir else None).release(lease_id, force=True, reason=reason)
    click.echo(f"released lease {lease_id}: {', '.join(freed)} (logged in reservations.jsonl)")


def _add_k8s() -> None:
    """`bench k8s`: the qualifier's own command, so `bench k8s --help` lists its options."""
    from harness.k8s_cli import main as k8s_main

    main.add_command(k8s_main, "k8s")


_add_k8s()


if __name__ == "__main__":
    main(prog_name="bench")
