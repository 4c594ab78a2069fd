"""Objectives and the binding limit of one run, computed the same way from either engine.

Both engines give, per training step k: ``wait_start`` (the trainer became free and started
waiting for a batch), ``batch_ready`` (= train start, disaggregated), ``train_end`` and
``publish_end`` (the new weights usable by rollout). The step time is
``publish_end - wait_start``; the first step also holds the cold start (the first batch
generated from nothing), so the steady-state figures use steps 2..K when K >= 2:

- ``step_time_s``: mean of step times 2..K (= mean interval between publications);
- ``trained_tokens_per_s``: completion tokens trained in steps 2..K / (publish_end[K] -
  publish_end[1]);
- ``gpu_hours_per_1k_steps``: (rollout GPUs + training GPUs) x step_time_s x 1000 / 3600;
- ``staleness_mean``: mean staleness of every trained group (all steps).

**Binding limit.** Over steps 2..K the trainer's time splits into waiting for a batch
(``wait``: the rollout side, generation plus any admission/staleness hold-back, could not
supply a full batch sooner), training (``train``) and publishing the weights (``sync``).
The binding limit is the largest of the three: ``rollout`` (the trainer starves: more or
faster rollout would shorten the step), ``training`` (batches wait for the trainer: rollout is
already ahead, more training GPUs would shorten the step) or ``weight_sync``. The three
fractions are written too, so a near tie is visible. With K = 1 the single step is used.
"""

from __future__ import annotations

import numpy as np

BINDINGS = ("rollout", "training", "weight_sync")


def step_metrics(wait_start, batch_ready, train_end, publish_end, staleness, trained_tokens, steps_requested: int,
                 gpus: int) -> dict:
    ws, br, te, pe = (np.asarray(x, dtype=float) for x in (wait_start, batch_ready, train_end, publish_end))
    tok = np.asarray(trained_tokens, dtype=float)
    k = len(pe)
    stale = np.asarray(staleness, dtype=float)
    row = {"training_steps": int(k), "complete": bool(k >= steps_requested),
           "makespan_s": float(pe[-1]) if k else 0.0,
           "staleness_mean": float(stale.mean()) if len(stale) else 0.0,
           "staleness_max": int(stale.max()) if len(stale) else 0}
    if k == 0:
        return {**row, "step_time_s": float("nan"), "trained_tokens_per_s": 0.0, "gpu_hours_per_1k_steps": float("nan"),
                "wait_frac": float("nan"), "train_frac": float("nan"), "sync_frac": float("nan"), "binding": "none"}
    lo = 1 if k >= 2 else 0
    step_times = pe[lo:] - ws[lo:]
    span = pe[-1] - pe[0] if k >= 2 else pe[0]
    step_time = float(step_times.mean())
    parts = np.array([(br[lo:] - ws[lo:]).sum(), (te[lo:] - br[lo:]).sum(), (pe[lo:] - te[lo:]).sum()])
    total = parts.sum()
    fr = parts / total if total > 0 else np.zeros(3)
    return {**row, "step_time_s": step_time, "trained_tokens_per_s": float(tok[lo:].sum() / span) if span > 0 else 0.0,
            "gpu_hours_per_1k_steps": gpus * step_time * 1000 / 3600,
            "wait_frac": float(fr[0]), "train_frac": float(fr[1]), "sync_frac": float(fr[2]),
            "binding": BINDINGS[int(np.argmax(parts))]}


def report_metrics(report, cfg) -> dict:
    """`step_metrics` of a SimPy `Report`."""
    s = report.steps
    gpus = cfg.deployment.rollout.gpus + cfg.deployment.training.gpus
    return step_metrics([x.wait_start for x in s], [x.train_start for x in s], [x.train_end for x in s],
                        [x.publish_end for x in s], [v for x in s for v in x.staleness],
                        [x.trained_completion_tokens for x in s], cfg.run.training_steps, gpus)


def fast_metrics(res, m: int, gpus: int) -> dict:
    """`step_metrics` of configuration ``m`` of a `simrl_fast` `FastResults`."""
    k = int(res.steps_done[m])
    st = res.stale[m, :k]
    return step_metrics(res.wait_start[m, :k], res.train_start[m, :k], res.train_end[m, :k], res.publish_end[m, :k],
                        st[st >= 0], res.completion_tokens[m, :k], int(res.steps[m]), gpus)
