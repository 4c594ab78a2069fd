"""`simrl.observe.Observables` from the JAX engine's results (configuration ``m``)."""

from __future__ import annotations

from simrl.observe import Observables, StepObservation, histogram
from simrl_fast.results import FastResults


def from_fast(res: FastResults, m: int) -> Observables:
    k = int(res.steps_done[m])
    steps = []
    for j in range(k):
        gids = [int(g) for g in res.gids[m, j] if g >= 0]
        steps.append(StepObservation(
            step=j + 1, train_version=j, wait_start=float(res.wait_start[m, j]),
            batch_ready=float(res.batch_ready[m, j]), train_end=float(res.train_end[m, j]),
            publish_end=float(res.publish_end[m, j]), groups=len(gids),
            staleness_histogram=histogram(res.stale[m, j, : len(gids)]),
            trained_completion_tokens=int(res.completion_tokens[m, j]),
            trainer_busy_s=float(res.train_end[m, j] - res.train_start[m, j]),
        ))
    return Observables(steps=tuple(steps), complete=bool(k >= int(res.steps[m])))
