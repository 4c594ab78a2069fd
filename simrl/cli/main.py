"""`srl`: run a simulation (the default command), step through one, list presets.

Commands parse, call the domain, render. User errors leave through `simrl.cli.app.abort`
(re-exported here for older callers).
"""

from __future__ import annotations

import os
import sys
import time


def _process_age_s() -> float:
    """Seconds since this process started (Linux /proc; 0 elsewhere), so the printed wall time
    includes the interpreter's start and the imports."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


_T_START = time.perf_counter() - _process_age_s()  # the command's start, before the imports below

import click  # noqa: E402

from simrl.cli.app import (  # noqa: E402
    EXIT_IMPOSSIBLE,
    AppGroup,
    abort,
    check_output_dir,
    common_options,
    debug,
    info,
    json_option,
    to_json,
    user_error_types,
    user_errors,
    warn,
)
from simrl.config import load_config, unstructure  # noqa: E402
from simrl.strictio import did_you_mean  # noqa: E402

EXAMPLES = """\b
Examples:
  srl                                    # the embedded default scenario
  srl policy=sync                        # another policy, its defaults
  srl policy=bounded_async policy.max_staleness=2 deployment.rollout.instances=4
  srl --config my.yaml run.seed=3        # a YAML file, then overrides
  srl --png                              # also PNG plots (HTML plots are always written)
  srl step                               # step through the default run event by event
  srl presets                            # list the policies / system presets
"""


def _user_errors():
    """The domain's user-error classes (kept for callers of the old name; see `simrl.cli.app`)."""
    return user_error_types()


class DefaultRunGroup(AppGroup):
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


def load(config_path, overrides, output_dir=None):
    """The configuration from the command line; `-o DIR` sets run.output_dir."""
    import attrs

    cfg = load_config(config_path, overrides)
    if output_dir is not None:
        cfg = attrs.evolve(cfg, run=attrs.evolve(cfg.run, output_dir=str(output_dir)))
    return cfg


@cli.command("run", epilog=EXAMPLES)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option("-o", "--output", "output_dir", type=click.Path(file_okay=False),
              help="Directory the run directory goes into (sets run.output_dir).")
@click.option("--png", is_flag=True,
              help="Also render the plots as PNG (seconds per run; the HTML views are always written).")
@click.option("--staleness", "staleness", type=click.IntRange(min=0), default=None,
              help="Bound staleness at N versions with the policy's own knob (also `staleness=N`); "
                   "prints which knob it set.")
@common_options
@json_option
@click.argument("overrides", nargs=-1)
def run_cmd(config_path, output_dir, png, as_json, overrides, staleness=None):
    """Run one simulation and write <run.output_dir>/<run-name>/.

    The run directory is built beside its final place and renamed in when complete: a rerun
    replaces the previous run's directory whole.
    """
    from simrl.atomic import staged_dir
    from simrl.cli.progress import sim_progress
    from simrl.engine.sim import build_simulation, summarise
    from simrl.output import run_dir, write_run

    t0 = _T_START
    phases = {"start-up": time.perf_counter() - t0}  # interpreter and imports
    with user_errors():
        from presets._staleness import resolve_staleness
        from simrl.policy import PolicyError

        try:
            overrides, asked = resolve_staleness(overrides, staleness,
                                                 lambda ovs: load(config_path, ovs).policy.kind)
        except PolicyError as exc:
            abort(str(exc))
        if asked is not None:
            info(asked.message())
        cfg = load(config_path, overrides, output_dir)
        check_output_dir(cfg.run.output_dir, "run.output_dir (-o/--output)")
        phases["configure"] = time.perf_counter() - t0 - sum(phases.values())
        sim = build_simulation(cfg)
        phases["build"] = time.perf_counter() - t0 - sum(phases.values())
        with sim_progress(sim):
            sim.run()
        report = summarise(sim)
        phases["simulate"] = time.perf_counter() - t0 - sum(phases.values())
        out = run_dir(cfg, report)
        with staged_dir(out) as tmp:
            write_run(cfg, report, sim.events, sim.samples, out=tmp, png=png)
            phases["write"] = time.perf_counter() - t0 - sum(phases.values())
            if cfg.run.plots:
                _write_plots(tmp, report, sim, png)
                phases["plots"] = time.perf_counter() - t0 - sum(phases.values())
    wall = time.perf_counter() - t0
    debug("phases: " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
    if as_json:
        click.echo(to_json({"run_dir": str(out), "totals": report.totals, "diagnosis": report.diagnosis,
                            "wall_s": round(wall, 3), "phases_s": {k: round(v, 3) for k, v in phases.items()}}))
    else:
        info(render_summary(report, wall))
        if asked is not None:
            info(f"staleness asked {asked.n}: reached max {report.totals['staleness_max']}, mean "
                 f"{report.totals['staleness_mean']:.2f}, bound declared {report.totals['staleness_bound']}")
        click.echo(f"run directory: {out}")
    if report.diagnosis:
        warn("the run stopped early:\n" + report.diagnosis)
        raise SystemExit(EXIT_IMPOSSIBLE)


def _write_plots(out, report, sim, png: bool) -> None:
    try:
        from simrl.plots import write_plots
    except ImportError as exc:
        warn(f"plots skipped ({exc}); install the plot dependencies: pip install altair vl-convert-python")
        return
    write_plots(out, report, sim.events, sim.samples, png=png)


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
        ("wall time (whole command)", f"{wall_s:.2f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


@cli.command("presets")
@click.argument("action", required=False, type=click.Choice(["show"]))
@click.argument("name", required=False)
@common_options
@json_option
def presets_cmd(action, name, as_json):
    """List the policies (built-ins and system presets); `srl presets show NAME` for one."""

    import attrs

    from simrl.policy.registry import policy_class, policy_kinds

    if action is None:
        rows = {kind: (_policy_doc(policy_class(kind)).splitlines() or [""])[0] for kind in policy_kinds()}
        if as_json:
            click.echo(to_json(rows))
            return
        for kind, doc in rows.items():
            click.echo(f"{kind:<16} {doc}")
        return
    if not name:
        abort("srl presets show NAME: name a policy (see `srl presets`)")
    try:
        cls = policy_class(name)
    except KeyError:
        abort(f"unknown policy {name!r}{did_you_mean(name, policy_kinds())}; known: {', '.join(policy_kinds())}")
    if as_json:
        click.echo(to_json({"kind": name, "doc": _policy_doc(cls), "upstream": getattr(cls, "upstream", ""),
                            "knobs": unstructure(load_config(overrides=[f"policy={name}"]))["policy"]}))
        return
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
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML configuration file.")
@common_options
@json_option
@click.argument("overrides", nargs=-1)
def config_cmd(config_path, as_json, overrides):
    """Print the resolved configuration (YAML, or JSON with --json); checks it without running."""
    import yaml

    with user_errors():
        cfg = load_config(config_path, overrides)
    data = unstructure(cfg)
    if as_json:
        click.echo(to_json(data))
    else:
        click.echo(yaml.safe_dump(data, sort_keys=True), nl=False)


def _register_step():
    from simrl.cli.step import step_cmd

    cli.add_command(step_cmd, "step")


_register_step()


def main(argv=None):
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="srl")


__all__ = ["abort", "cli", "main", "render_summary"]
