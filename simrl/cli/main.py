"""`srl`: run a simulation (the default command), step through one, list presets.

Commands parse, call the domain, render. User errors leave through `abort()`.
"""

from __future__ import annotations

import contextlib
import sys
import time
import warnings

import click

from simrl.config import ConfigError, load_config, unstructure

EXAMPLES = """\b
Examples:
  srl                                    # the embedded default scenario
  srl policy=sync                        # another policy, its defaults
  srl policy=bounded_async policy.max_staleness=2 deployment.rollout.instances=4
  srl --config my.yaml run.seed=3        # a YAML file, then overrides
  srl step                               # step through the default run event by event
  srl presets                            # list the policies / system presets
"""


def abort(message: str, code: int = 2):
    click.secho(f"error: {message}", fg="red", err=True)
    raise SystemExit(code)


def _user_errors():
    from simrl.cost.base import CostModelError, OutOfDomainError
    from simrl.engine.core import SimulationError

    return (ConfigError, SimulationError, CostModelError, OutOfDomainError)


@contextlib.contextmanager
def one_line_cost_warnings():
    """Print cost-model warnings (GPU of a fit, validity domain) as ``warning: ...`` on stderr,
    without Python's source line; other warnings keep the default format."""
    from simrl.cost.base import CostModelWarning

    with warnings.catch_warnings():
        default = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, CostModelWarning):
                click.secho(f"warning: {message}", fg="yellow", err=True)
            else:
                default(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


class DefaultRunGroup(click.Group):
    """A group whose bare invocation, or invocation with overrides, means `run`."""

    def parse_args(self, ctx, args):
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultRunGroup, epilog=EXAMPLES)
def cli():
    """SimRL: simulate asynchronous RL post-training of LLMs.

    With no command, runs a simulation: `srl [--config FILE] [KEY=VALUE ...]`.
    """


@cli.command("run", epilog=EXAMPLES)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option("--quiet", is_flag=True, help="Print only the run directory.")
@click.argument("overrides", nargs=-1)
def run_cmd(config_path, quiet, overrides):
    """Run one simulation and write outputs/<run-name>/."""
    from simrl.engine.sim import build_simulation, summarise
    from simrl.output import write_run

    with one_line_cost_warnings():
        try:
            cfg = load_config(config_path, overrides)
            t0 = time.perf_counter()
            sim = build_simulation(cfg)
            sim.run()
            report = summarise(sim)
            wall = time.perf_counter() - t0
        except _user_errors() as exc:
            abort(str(exc))
    out = write_run(cfg, report, sim.events, sim.samples)
    if cfg.run.plots:
        try:
            from simrl.plots import write_plots
        except ImportError:
            write_plots = None
        if write_plots is not None:
            write_plots(out, report, sim.events, sim.samples)
    if not quiet:
        click.echo(render_summary(report, wall))
    click.echo(f"run directory: {out}")
    if report.diagnosis:
        click.secho("the run stopped early:\n" + report.diagnosis, fg="yellow", err=True)
        raise SystemExit(3)


def render_summary(report, wall_s: float) -> str:
    t = report.totals
    rows = [
        ("policy", report.policy),
        ("workload", f"{report.workload['name']} ({report.workload['groups']} groups)"),
        ("training steps", f"{t['training_steps']}"),
        ("simulated time", f"{t['makespan_s']:.1f} s"),
        ("mean step time", f"{t['step_time_mean_s']:.2f} s"),
        ("trained tokens/s", f"{t['trained_tokens_per_s']:.0f}"),
        ("generated tokens/s", f"{t['generated_tokens_per_s']:.0f}"),
        ("staleness mean / max", f"{t['staleness_mean']:.2f} / {t['staleness_max']}"),
        ("wasted tokens (abort / filter)", f"{t['tokens_wasted_abort']} / {t['tokens_wasted_filter']}"),
        ("re-prefilled tokens", f"{t['tokens_reprefilled']}"),
        ("rollout busy / trainer busy", f"{t['rollout_busy_fraction']:.2f} / {t['trainer_busy_fraction']:.2f}"),
        ("preemptions / aborts", f"{t['preemptions']} / {t['aborts']}"),
        ("wall time", f"{wall_s:.2f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


@cli.command("presets")
@click.argument("action", required=False, type=click.Choice(["show"]))
@click.argument("name", required=False)
def presets_cmd(action, name):
    """List the policies (built-ins and system presets); `srl presets show NAME` for one."""
    import attrs

    from simrl.policy.registry import policy_class, policy_kinds

    if action is None:
        for kind in policy_kinds():
            doc = _policy_doc(policy_class(kind))
            click.echo(f"{kind:<16} {doc.splitlines()[0] if doc else ''}")
        return
    if not name:
        abort("srl presets show NAME: name a policy (see `srl presets`)")
    try:
        cls = policy_class(name)
    except KeyError:
        abort(f"unknown policy {name!r}; known: {', '.join(policy_kinds())}")
    click.echo(f"{name}: {_policy_doc(cls)}")
    if getattr(cls, "upstream", ""):
        click.echo(f"\nupstream: {cls.upstream}")
    click.echo("\nknobs (default):")
    inst = cls()
    for a in attrs.fields(cls):
        click.echo(f"  policy.{a.name} = {unstructure_value(getattr(inst, a.name))}")


def _policy_doc(cls) -> str:
    """The policy class's docstring, else its module's (presets document themselves there)."""
    doc = cls.__doc__ or sys.modules[cls.__module__].__doc__ or ""
    return doc.strip()


def unstructure_value(v):
    return "null" if v is None else v


@cli.command("config")
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1)
def config_cmd(config_path, overrides):
    """Print the resolved configuration as YAML."""
    import yaml

    try:
        cfg = load_config(config_path, overrides)
    except ConfigError as exc:
        abort(str(exc))
    click.echo(yaml.safe_dump(unstructure(cfg), sort_keys=True), nl=False)


def _register_step():
    from simrl.cli.step import step_cmd

    cli.add_command(step_cmd, "step")


_register_step()


def main(argv=None):
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="srl")
