"""`srl-workload`: synthesise, validate, describe, import and collect workload traces.

Commands parse their arguments, call the domain (`workloads.generate`, `workloads.trace`,
`workloads.stats`, `workloads.splitwise`, `workloads.collect`) and render the result. Every user
error (a ValueError, TraceError or OSError from the domain) leaves through `abort`, one
`click.ClickException`: a one-line message and exit status 1, never a traceback.
"""

from __future__ import annotations

import contextlib
import json

import click

from workloads.registry import generate, generator_names, generator_spec
from workloads.stats import format_stats, workload_stats
from workloads.trace import read_trace, write_trace


def abort(message: str):
    """The one exit for user errors."""
    raise click.ClickException(message)


@contextlib.contextmanager
def user_errors():
    try:
        yield
    except (ValueError, OSError) as exc:
        abort(str(exc))


def parse_knobs(pairs: tuple[str, ...]) -> dict[str, str]:
    """``("key=value", ...)`` into a dict of strings (the registry coerces the types)."""
    knobs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            abort(f"knob {pair!r} must look like key=value")
        knobs[key.strip()] = value
    return knobs


def _summary_line(workload) -> str:
    s = workload.summary()
    return (f"{s['name']}: {s['groups']} groups, {s['trajectories']} trajectories, {s['calls']} calls, "
            f"{s['completion_tokens']} completion tokens\nschedule_sha256 {s['schedule_sha256']}")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Workload traces for SimRL: prompt groups of trajectories of model calls."""


@main.command("list")
def list_cmd():
    """List the generators, their default group sizes and knobs."""
    for name in generator_names():
        spec = generator_spec(name)
        click.echo(f"{name} (group size {spec.default_group_size}): {spec.doc}")
        for key, value in spec.knobs.items():
            click.echo(f"    {key} = {json.dumps(value)}")


@main.command()
@click.argument("name")
@click.argument("knobs", nargs=-1)
@click.option("--groups", default=160, show_default=True, type=int, help="prompt groups to draw")
@click.option("--seed", default=0, show_default=True, type=int, help="master seed")
@click.option("--group-size", default=None, type=int, help="trajectories per group (default: the generator's)")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="trace to write (JSONL)")
def synth(name, knobs, groups, seed, group_size, output):
    """Draw workload NAME and write it as a trace; KNOBS are key=value overrides."""
    with user_errors():
        workload = generate(name, groups, seed, group_size, **parse_knobs(knobs))
        write_trace(workload, output)
    click.echo(f"wrote {output}\n{_summary_line(workload)}")


@main.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--max-model-len", default=None, type=int, help="reject calls with prompt + completion above this")
def validate(trace, max_model_len):
    """Check TRACE; print OK, a summary and its schedule_sha256, or exit 1 naming line and field."""
    with user_errors():
        workload = read_trace(trace, max_model_len=max_model_len)
    click.echo(f"OK {trace}\n{_summary_line(workload)}")


@main.command()
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--plot", default=None, type=click.Path(dir_okay=False), help="write length histograms (PNG)")
@click.option("--json", "as_json", is_flag=True, help="print the statistics as JSON")
def stats(trace, plot, as_json):
    """Quantiles of prompt, completion and new tokens, group sizes, turns and reward spread."""
    with user_errors():
        workload = read_trace(trace)
    result = workload_stats(workload)
    click.echo(json.dumps(result, indent=2) if as_json else format_stats(result))
    if plot:
        from workloads.stats import stats_chart, write_png  # altair and vl-convert load only here

        with user_errors():
            write_png(stats_chart(workload), plot)
        click.echo(f"wrote {plot}")


@main.group("import")
def import_group():
    """Import real request traces."""


@import_group.command("splitwise")
@click.argument("csv_path", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@click.option("--group-size", default=1, show_default=True, type=int, help="consecutive rows per group")
@click.option("--seed", default=0, show_default=True, type=int, help="seed of the synthetic rewards")
@click.option("--max-groups", default=None, type=int, help="keep only the first groups")
@click.option("--max-model-len", default=None, type=int, help="drop rows that cannot fit, clip the rest")
def import_splitwise_cmd(csv_path, output, group_size, seed, max_groups, max_model_len):
    """Turn a Splitwise CSV (arrived_at,num_prefill_tokens,num_decode_tokens) into a trace."""
    from workloads.splitwise import import_splitwise

    with user_errors():
        workload = import_splitwise(csv_path, group_size=group_size, seed=seed, max_groups=max_groups,
                                    max_model_len=max_model_len)
        write_trace(workload, output)
    click.echo(f"wrote {output}\n{_summary_line(workload)}")


@main.command("collect")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@click.option("--name", default="collected", show_default=True, help="workload name in the trace header")
def collect_cmd(logs, output, name):
    """Turn per-call logs (turns.jsonl or OpenAI-compatible request logs) into a trace."""
    from workloads.collect import collect

    with user_errors():
        workload = collect(logs, name=name)
        write_trace(workload, output)
    click.echo(f"wrote {output}\n{_summary_line(workload)}")
