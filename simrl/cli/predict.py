"""`srl-predict`: runtime prediction from a live snapshot (docs/predict.md).

Reads a snapshot (``simrl.snapshot.v1``, written by ``srl step``'s ``snap`` command or by a
converter), restores the engine from it over N seeded draws of the unknown lengths and future
prompts, and prints the predicted time to the next batch(es) with p10/p50/p90, whether the
trainer stalls waiting for it, and per-request finish quantiles. What-ifs (``--move-to-training``,
``--tp``, ``--staleness``, each repeatable) are predicted next to the baseline.
"""

from __future__ import annotations

import math

import click

from simrl.cli.app import (
    AppCommand,
    common_options,
    info,
    json_option,
    register_user_error,
    to_json,
    user_errors,
)

COUNT = click.IntRange(1, 100_000)


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


@click.command("srl-predict", cls=AppCommand)
@click.argument("snapshot", type=click.Path(dir_okay=False))
@click.option("--draws", default=20, show_default=True, type=COUNT, help="seeded draws of the unknown future")
@click.option("--batches", default=1, show_default=True, type=click.IntRange(1, 1000),
              help="how many upcoming training batches to predict")
@click.option("--move-to-training", "moves", multiple=True, type=int,
              help="what-if: move K rollout engines to training (negative: training to rollout); repeatable")
@click.option("--tp", "tps", multiple=True, type=click.IntRange(1, 4096),
              help="what-if: rollout TP T on the same rollout GPUs; repeatable")
@click.option("--staleness", "bounds", multiple=True, type=click.IntRange(0, 1_000_000),
              help="what-if: the policy's staleness bound B; repeatable")
@click.option("--requests", "n_requests", default=10, show_default=True, type=click.IntRange(0, 1_000_000),
              help="per-request lines to print (latest predicted finish first)")
@json_option
@common_options
def main(snapshot, draws, batches, moves, tps, bounds, n_requests, as_json):
    """Predict the next training batches of a live RL pipeline from its SNAPSHOT."""
    from simrl.predict import WhatIf, predict
    from simrl.snapshot import SnapshotError, read_snapshot

    register_user_error(SnapshotError)
    scenarios = [WhatIf()] + [WhatIf(move_to_training=k) for k in moves] + [WhatIf(tp=t) for t in tps] \
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
