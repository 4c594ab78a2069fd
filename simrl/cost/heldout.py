"""Held-out evaluation of the kernel database: predict a model never profiled from its shape.

`leave_one_model_out` fits the physics-only kernel DB on every model but one and predicts the
held-out model's operators, reporting per-operator and per-layer-total errors (the layer total is
what the composed rollout model sums). Used by benchmarks/cost_models.py and the tests.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from simrl.cost.fit import summarize
from simrl.cost.fitting import error_summary
from simrl.cost.kerneldb import LayerShape, fit_kernel_db


def leave_one_model_out(obs) -> dict:
    models = sorted({o.inputs["model"] for o in obs})
    out = {}
    for held in models:
        db = fit_kernel_db([o for o in obs if o.inputs["model"] != held], with_tables=False)
        test = [o for o in obs if o.inputs["model"] == held]
        pred = np.array([db.predict_physics(o.name, LayerShape.from_inputs(o.inputs), o.inputs["num_tokens"],
                                            int(o.inputs["tp"])) for o in test])
        act = np.array([o.value for o in test])
        res = summarize(pred, act, [o.name for o in test])
        # The layer total the composed model sums (all measured operators of one run row).
        layer = defaultdict(lambda: [0.0, 0.0])
        for o, p in zip(test, pred, strict=True):
            key = (int(o.inputs["tp"]), int(o.inputs["num_tokens"]))
            layer[key][0] += p
            layer[key][1] += o.value
        lp = np.array([v[0] for v in layer.values()])
        la = np.array([v[1] for v in layer.values()])
        res["layer_total"] = error_summary(lp, la)
        out[held] = res
    return out
