"""`srl-predict`: runtime prediction from a live snapshot (docs/predict.md).

Subcommands: ``srl-predict SNAPSHOT`` (the default, ``predict``), ``take`` (simulate a run and
snapshot it at an instant or at its load spike), ``move-engines`` (how many rollout engines can
move to training without stalling the next batch: a report with a plot) and ``convert`` (a
snapshot from the bench harness's evidence).

``predict`` reads a snapshot (``simrl.snapshot.v1``, written by ``srl step``'s ``snap`` command or by a
converter), restores the engine from it over N seeded draws of the unknown lengths and future
prompts, and prints the predicted time to the next batch(es) with p10/p50/p90, whether the
trainer stalls waiting for it, and per-request finish quantiles. What-ifs (``--move-to-training``,
``--tp``, ``--staleness``, each repeatable) are predicted next to the baseline.
"""

from __future__ import annotations

import math

import click

from simrl.cli.app import (
    AppGroup,
    FiniteFloat,
    check_output_dir,
    check_output_file,
    common_options,
    info,
    json_option,
    register_user_error,
    to_json,
    user_errors,
)

COUNT = click.IntRange(1, 100_000)


class DefaultPredictGroup(AppGroup):
    """``srl-predict SNAPSHOT ...`` means ``srl-predict predict SNAPSHOT ...``."""

    default_command = "predict"

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


@click.group("srl-predict", cls=DefaultPredictGroup)
def main():
    """Runtime prediction of an RL pipeline from a live snapshot (docs/predict.md).

    `srl-predict SNAPSHOT [options]` predicts the next batches (the `predict` command).
    """


class MoveRange(click.ParamType):
    """K, or A..B (every integer from A to B)."""

    name = "K|A..B"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        text = str(value)
        try:
            if ".." in text:
                a, b = (int(x) for x in text.split("..", 1))
                if b < a:
                    raise ValueError
                return tuple(range(a, b + 1))
            return (int(text),)
        except ValueError:
            self.fail(f"{text!r} is neither an integer K nor a range A..B with A <= B", param, ctx)


def _fmt(x: float, t0: float) -> str:
    return "never" if math.isnan(x) else f"{x - t0:+.2f}"


def describe(snap) -> str:
    cfg = snap.sim_config()
    ro = cfg.deployment.rollout
    n_req = len(snap.requests())
    tr = snap.trainer
    return (f"snapshot at t = {snap.time_s:.3f} s: policy {cfg.policy.kind}, {ro.instances} rollout engine(s) "
            f"(TP{ro.tp}), training {cfg.deployment.training.gpus} GPUs; trainer {tr.phase} "
            f"(steps done {tr.steps_done}/{tr.steps_total}, version {tr.version}); {n_req} requests in flight, "
            f"{len(snap.running_groups)} groups running, {len(snap.buffer)} buffered")


@main.command("predict")
@click.argument("snapshot", type=click.Path(dir_okay=False))
@click.option("--draws", default=20, show_default=True, type=COUNT, help="seeded draws of the unknown future")
@click.option("--batches", default=1, show_default=True, type=click.IntRange(1, 1000),
              help="how many upcoming training batches to predict")
@click.option("--move-to-training", "moves", multiple=True, type=MoveRange(),
              help="what-if: move K rollout engines to training (negative: training to rollout), or each of "
                   "A..B; repeatable")
@click.option("--tp", "tps", multiple=True, type=click.IntRange(1, 4096),
              help="what-if: rollout TP T on the same rollout GPUs; repeatable")
@click.option("--staleness", "bounds", multiple=True, type=click.IntRange(0, 1_000_000),
              help="what-if: the policy's staleness bound B; repeatable")
@click.option("--requests", "n_requests", default=10, show_default=True, type=click.IntRange(0, 1_000_000),
              help="per-request lines to print (latest predicted finish first)")
@json_option
@common_options
def predict_cmd(snapshot, draws, batches, moves, tps, bounds, n_requests, as_json):
    """Predict the next training batches of a live RL pipeline from its SNAPSHOT."""
    from simrl.predict import WhatIf, predict
    from simrl.snapshot import SnapshotError, read_snapshot

    register_user_error(SnapshotError)
    scenarios = [WhatIf()] + [WhatIf(move_to_training=k) for ks in moves for k in ks if k] + [WhatIf(tp=t) for t in tps] \
        + [WhatIf(staleness=b) for b in bounds]
    with user_errors():
        snap = read_snapshot(snapshot)
        results = [predict(snap, draws=draws, batches=batches, what_if=w) for w in scenarios]
    if as_json:
        click.echo(to_json({"snapshot": snapshot, "predictions": [p.to_dict() for p in results]}))
        return
    t0 = snap.time_s
    info(describe(snap))
    info(f"predicted over {draws} draws; times in seconds after the snapshot, p10 / p50 / p90")
    for p in results:
        info(f"\n[{p.label}]" + (f" resharding/reload {p.reshard_s:.2f} s" if p.reshard_s else ""))
        for k in range(batches):
            q = p.batch_quantiles(k)
            info(f"  next batch {k + 1}: {' / '.join(_fmt(x, t0) for x in q)}")
        q50 = p.batch_quantiles(0)[1]
        idle = q50 - p.trainer_free_s
        free = f"trainer free at {_fmt(p.trainer_free_s, t0)}"
        if math.isnan(q50):
            info(f"  {free}; stalls: yes (no batch forms within the draws' horizon)")
        else:
            verdict = f"yes, trainer idle {idle:.2f} s (p50)" if p.stalls() else "no"
            info(f"  {free}; stalls: {verdict}")
    base = results[0]
    if n_requests and base.request_finish:
        where = {q.rid: (inst, w, q) for inst, w, q in snap.requests()}
        rows = sorted(base.request_finish, key=lambda rid: -_nan0(base.request_quantiles(rid)[1]))
        info(f"\nrequests in flight ({min(n_requests, len(rows))} of {len(rows)}, as is):")
        info("  rid    instance  where    turn  tokens so far   finish p10 / p50 / p90")
        for rid in rows[:n_requests]:
            inst, w, q = where[rid]
            qs = base.request_quantiles(rid)
            info(f"  {rid:<6} {inst:>8}  {w:<8} {q.turn:>4}  {q.generated_tokens:>13}   "
                 + " / ".join(_fmt(x, t0) for x in qs))


def _nan0(x: float) -> float:
    return math.inf if math.isnan(x) else x


def _load_cfg(config_path, overrides):
    from simrl.config import load_config

    return load_config(config_path, overrides)


def _deployment(cfg) -> str:
    d = cfg.deployment
    ro, tr = d.rollout, d.training
    return (f"{d.model}, {ro.instances} rollout engines (TP{ro.tp}, {ro.gpus} x {ro.gpu}) + {tr.gpus} x {tr.gpu} "
            f"training, policy {cfg.policy.kind}, workload {cfg.workload.generator or cfg.workload.trace} "
            f"({cfg.workload.groups} prompts)")


@main.command("take")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML configuration file.")
@click.option("--at", "at", default="spike", show_default=True,
              help="when: a time in seconds (the last event boundary before it), or `spike` (the instant "
                   "with the most requests in flight while the trainer waits for a batch)")
@click.option("--after-steps", default=1, show_default=True, type=click.IntRange(0, 1_000_000),
              help="spike: look while the trainer waits for the batch after this many steps")
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="the snapshot file to write")
@json_option
@common_options
@click.argument("overrides", nargs=-1)
def take_cmd(config_path, at, after_steps, output, as_json, overrides):
    """Simulate a run (the `srl` configuration) and write its snapshot at an instant."""
    from simrl.predict import spike_snapshot
    from simrl.snapshot import SnapshotError, write_snapshot

    register_user_error(SnapshotError)
    with user_errors():
        cfg = _load_cfg(config_path, overrides)
        out = check_output_file(output)
        spike = None
        if at == "spike":
            spike = spike_snapshot(cfg, after_steps=after_steps)
            snap = spike.snapshot
        else:
            snap = _snapshot_at_time(cfg, at)
        write_snapshot(snap, out)
    if as_json:
        click.echo(to_json({"snapshot": str(out), "time_s": snap.time_s, "spike": None if spike is None else {
            "in_flight": spike.in_flight, "events": spike.events, "step": spike.step,
            "truth_next_batch_s": spike.truth_batch_s}}))
        return
    info(describe(snap))
    if spike is not None:
        info(f"load spike while the trainer waits for the batch of step {spike.step}: {spike.in_flight} requests "
             f"in flight; the run itself had that batch ready at +{spike.truth_batch_s - snap.time_s:.2f} s")
    info(f"snapshot written to {out}")


def _snapshot_at_time(cfg, at: str):
    from simrl.engine.sim import build_simulation
    from simrl.snapshot import SnapshotError, take_snapshot

    try:
        t = float(at)
    except ValueError:
        raise SnapshotError(f"--at: expected a time in seconds or 'spike', got {at!r}") from None
    if not (t >= 0 and math.isfinite(t)):
        raise SnapshotError(f"--at: expected a time >= 0 s, got {at!r}")
    sim = build_simulation(cfg)
    sim.run_before(t)
    return take_snapshot(sim)


@main.command("move-engines")
@click.argument("snapshot", required=False, type=click.Path(dir_okay=False))
@click.option("--spike", is_flag=True,
              help="no SNAPSHOT: simulate the configuration (--config, --set) and take its load "
                   "spike while the trainer is idle")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="--spike: YAML configuration file")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="--spike: a configuration override (as `srl KEY=VALUE`); repeatable")
@click.option("--after-steps", default=1, show_default=True, type=click.IntRange(0, 1_000_000),
              help="--spike: the spike while the trainer waits for the batch after this many steps")
@click.option("--upto", "upto", type=click.IntRange(1, 100_000), default=None,
              help="try k = 0..UPTO engines moved (default: all but one rollout engine)")
@click.option("--draws", default=16, show_default=True, type=COUNT, help="seeded draws of the unknown future")
@click.option("--tolerance", default=1.0, show_default=True, type=FiniteFloat(0, 1e9),
              help="seconds the next batch may be later than as-is (median draw) before it counts as stalled")
@click.option("-o", "--output", "output", required=True, type=click.Path(file_okay=False),
              help="directory for report.md, move_engines.png/.html/.json (and spike.json with --spike)")
@click.option("--no-png", is_flag=True, help="write the HTML plot only (no PNG rendering)")
@json_option
@common_options
def move_engines_cmd(snapshot, spike, config_path, overrides, after_steps, upto, draws, tolerance, output,
                     no_png, as_json):
    """How many rollout engines can move to training without stalling the next batch?

    Predicts the next batch with k = 0, 1, ... engines moved (resharding priced by the
    weight-sync model), over the same draws for every k, and writes a report with a plot.
    """
    from simrl.predict import move_engines, spike_snapshot
    from simrl.predict_report import write_report
    from simrl.snapshot import SnapshotError, read_snapshot, write_snapshot

    register_user_error(SnapshotError)
    with user_errors():
        if (snapshot is None) == (not spike):
            raise SnapshotError("give either a SNAPSHOT file or --spike (simulate and take the load spike)")
        if snapshot is not None and (config_path or overrides):
            raise SnapshotError("--config/--set only go with --spike (a snapshot carries its configuration)")
        out = check_output_dir(output)
        sp = None
        if spike:
            cfg = _load_cfg(config_path, overrides)
            sp = spike_snapshot(cfg, after_steps=after_steps)
            snap = sp.snapshot
            out.mkdir(parents=True, exist_ok=True)
            write_snapshot(snap, out / "spike.json")
        else:
            snap = read_snapshot(snapshot)
        cfg = snap.sim_config()
        n = cfg.deployment.rollout.instances
        top = n - 1 if upto is None else upto
        if top >= n:
            raise SnapshotError(f"--upto {top}: the snapshot has {n} rollout engines (at most {n - 1} can move)")
        if top < 1:
            raise SnapshotError("the snapshot has one rollout engine: none can move")
        info(describe(snap))
        if sp is not None:
            info(f"load spike while the trainer waits for the batch of step {sp.step}: {sp.in_flight} requests "
                 f"in flight (the run itself had that batch at +{sp.truth_batch_s - snap.time_s:.2f} s)")
        info(f"predicting k = 0..{top} engines moved, {draws} draws each")

        def progress(k, p):
            q = p.batch_quantiles(0)
            info(f"  k = {k}: next batch ready {' / '.join(_fmt(x, snap.time_s) for x in q)} (p10 / p50 / p90)"
                 + (f", resharding {p.reshard_s:.2f} s" if p.reshard_s else ""))

        study = move_engines(snap, range(1, top + 1), draws=draws, tolerance_s=tolerance, progress=progress)
        files = write_report(study, out, snapshot_line=describe(snap), deployment=_deployment(cfg), instances=n,
                             spike=sp, png=not no_png)
    if as_json:
        click.echo(to_json({**study.to_dict(), "files": [str(f) for f in files]}))
        return
    info(f"\nstall threshold: {study.threshold_s:.2f} s after the snapshot (as-is p50 + {tolerance:g} s)")
    info(f"answer: {study.answer()}")
    info(f"report: {out / 'report.md'}")


@main.command("convert")
@click.argument("evidence", type=click.Path(file_okay=False))
@click.option("--from", "source", type=click.Choice(["harness"]), default="harness", show_default=True,
              help="what EVIDENCE is: a bench harness results directory (updates.jsonl, turns.jsonl)")
@click.option("--at", "at", required=True, type=FiniteFloat(0), help="the instant, seconds on the evidence's clock")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="YAML configuration of the deployment the evidence ran on")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="a configuration override (as `srl KEY=VALUE`); repeatable")
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="the snapshot file to write")
@common_options
def convert_cmd(evidence, source, at, config_path, overrides, output):
    """Write the snapshot of a recorded run at an instant (docs/predict.md, "Converters")."""
    from simrl.snapshot import SnapshotError, write_snapshot
    from simrl.snapshot_convert import from_harness, harness_config

    register_user_error(SnapshotError)
    with user_errors():
        out = check_output_file(output)
        cfg = harness_config(evidence, config_path, overrides)
        snap = from_harness(evidence, at, cfg)
        write_snapshot(snap, out)
    info(describe(snap))
    info(f"snapshot written to {out}")
