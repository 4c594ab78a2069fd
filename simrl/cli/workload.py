"""`srl-workload`: synthesise, validate, describe, import and collect workload traces.

Commands parse their arguments, call the domain (`workloads.generate`, `workloads.trace`,
`workloads.stats`, `workloads.splitwise`, `workloads.collect`) and render the result. It lives in
the CLI layer (it was `workloads.cli`) so that it shares the app of every SimRL command
(`simrl.cli.app`): every user error (a ValueError, TraceError or OSError from the domain) leaves
through `abort` with a message naming the file, line and field, exit status 2, never a
traceback; outputs are checked before any work.
"""

from __future__ import annotations

import json

import click

from simrl.cli.app import (
    AppGroup,
    abort,
    check_output_file,
    common_options,
    info,
    json_option,
    to_json,
    user_errors,
)
from workloads.registry import generate, generator_names, generator_spec
from workloads.stats import format_stats, workload_stats
from workloads.trace import read_trace, write_trace

COUNT = click.IntRange(1, 2**31 - 1)
SEED = click.IntRange(0, 2**63 - 1)


def parse_knobs(pairs: tuple[str, ...]) -> dict[str, str]:
    """``("key=value", ...)`` into a dict of strings (the registry coerces the types)."""
    knobs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            abort(f"knob {pair!r} must look like key=value")
        if key.strip() in ("groups", "seed", "group_size"):
            abort(f"knob {pair!r}: {key.strip()} is not a knob; use --{key.strip().replace('_', '-')}")
        if key.strip() in knobs:
            abort(f"knob {key.strip()} is given twice ({key.strip()}={knobs[key.strip()]} and {pair}); give it once")
        knobs[key.strip()] = value
    return knobs


def _summary(workload, output=None) -> dict:
    s = workload.summary()
    return {**({"output": str(output)} if output is not None else {}), **s}


def _report(workload, as_json: bool, output=None, first: str = "") -> None:
    if as_json:
        click.echo(to_json(_summary(workload, output)))
    else:
        if first:
            click.echo(first)
        info(_summary_line(workload))


def _summary_line(workload) -> str:
    s = workload.summary()
    return (f"{s['name']}: {s['groups']} groups, {s['trajectories']} trajectories, {s['calls']} calls, "
            f"{s['completion_tokens']} completion tokens\nschedule_sha256 {s['schedule_sha256']}")


@click.group(cls=AppGroup)
def main():
    """Workload traces for SimRL: prompt groups of trajectories of model calls."""


@main.command("list")
@common_options
@json_option
def list_cmd(as_json):
    """List the generators, their default group sizes and knobs."""
    if as_json:
        click.echo(to_json({n: {"group_size": generator_spec(n).default_group_size, "doc": generator_spec(n).doc,
                                   "knobs": generator_spec(n).knobs} for n in generator_names()}))
        return
    for name in generator_names():
        spec = generator_spec(name)
        click.echo(f"{name} (group size {spec.default_group_size}): {spec.doc}")
        for key, value in spec.knobs.items():
            click.echo(f"    {key} = {json.dumps(value)}")


@main.command()
@click.argument("name")
@click.argument("knobs", nargs=-1)
@click.option("--groups", default=160, show_default=True, type=COUNT, help="prompt groups to draw")
@click.option("--seed", default=0, show_default=True, type=SEED, help="master seed")
@click.option("--group-size", default=None, type=COUNT, help="trajectories per group (default: the generator's)")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="trace to write (JSONL)")
@common_options
@json_option
def synth(name, knobs, groups, seed, group_size, output, as_json):
    """Draw workload NAME and write it as a trace; KNOBS are key=value overrides."""
    with user_errors(ValueError):
        check_output_file(output)
        workload = generate(name, groups, seed, group_size, **parse_knobs(knobs))
        write_trace(workload, output)
    _report(workload, as_json, output, f"wrote {output}")


@main.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--max-model-len", default=None, type=COUNT, help="reject calls with prompt + completion above this")
@common_options
@json_option
def validate(trace, max_model_len, as_json):
    """Check TRACE; print OK, a summary and its schedule_sha256, or exit 2 naming line and field."""
    with user_errors(ValueError):
        workload = read_trace(trace, max_model_len=max_model_len)
    _report(workload, as_json, first=f"OK {trace}")


@main.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "--plot", "plot", default=None, type=click.Path(dir_okay=False),
              help="write length histograms (PNG)")
@common_options
@json_option
def stats(trace, plot, as_json):
    """Quantiles of prompt, completion and new tokens, group sizes, turns and reward spread."""
    with user_errors(ValueError):
        if plot:
            check_output_file(plot, "--plot", suffixes=(".png",))
        workload = read_trace(trace)
    result = workload_stats(workload)
    click.echo(to_json(result) if as_json else format_stats(result))
    if plot:
        from workloads.stats import stats_chart, write_png  # altair and vl-convert load only here

        with user_errors(ValueError):
            write_png(stats_chart(workload), plot)
        info(f"wrote {plot}", err=as_json)


@main.group("import")
def import_group():
    """Import real request traces."""


@import_group.command("splitwise")
@click.argument("csv_path", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@click.option("--group-size", default=1, show_default=True, type=COUNT, help="consecutive rows per group")
@click.option("--seed", default=0, show_default=True, type=SEED, help="seed of the synthetic rewards")
@click.option("--max-groups", default=None, type=COUNT, help="keep only the first groups")
@click.option("--max-model-len", default=None, type=click.IntRange(2, 2**31 - 1),
              help="drop rows that cannot fit, clip the rest")
@common_options
@json_option
def import_splitwise_cmd(csv_path, output, group_size, seed, max_groups, max_model_len, as_json):
    """Turn a Splitwise CSV (arrived_at,num_prefill_tokens,num_decode_tokens) into a trace."""
    from workloads.splitwise import import_splitwise

    with user_errors(ValueError):
        check_output_file(output)
        workload = import_splitwise(csv_path, group_size=group_size, seed=seed, max_groups=max_groups,
                                    max_model_len=max_model_len)
        write_trace(workload, output)
    _report(workload, as_json, output, f"wrote {output}")


@main.command("collect")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@click.option("--name", default="collected", show_default=True, help="workload name in the trace header")
@common_options
@json_option
def collect_cmd(logs, output, name, as_json):
    """Turn per-call logs (turns.jsonl or OpenAI-compatible request logs) into a trace."""
    from workloads.collect import collect

    with user_errors(ValueError):
        check_output_file(output)
        workload = collect(logs, name=name)
        write_trace(workload, output)
    _report(workload, as_json, output, f"wrote {output}")
