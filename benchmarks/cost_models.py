"""Held-out error of the composed rollout model's kernel DB on the real Vidur H100 data.

Prints (1) k-fold cross-validation over all operator observations of the three models (the
kernel DB as a run uses it: measured tables plus physics), and (2) leave-one-model-out: fit the
physics on two models and predict the third from its shape alone (no table of it), per operator
and for the layer total the composed model sums. Run: ``.venv/bin/python benchmarks/cost_models.py
[VIDUR_DIR] [--json]``.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from simrl.cost.fit import cross_validate
from simrl.cost.heldout import leave_one_model_out
from simrl.cost.vidur_import import import_vidur, vidur_data_dir

DEFAULT_DIR = str(vidur_data_dir("compute"))  # the H100 data shipped with the package


def _fmt(s: dict) -> str:
    return f"median {s['median_ape']:5.2f}%  mean {s['mean_ape']:6.2f}%  max {s['max_ape']:6.1f}%  (n={s['n']})"


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    obs = [o for o in import_vidur(args[0] if args else DEFAULT_DIR) if o.kind == "operator"]
    kf = cross_validate("composed", obs, k=5, seed=0, with_tables=True)
    lomo = leave_one_model_out(obs)
    if "--json" in argv:
        print(json.dumps({"kfold": kf, "leave_one_model_out": lomo}, indent=1, sort_keys=True))
        return 0
    print(f"Composed model kernel DB on {len(obs)} real H100 operator observations (Vidur)\n")
    print("5-fold cross-validation (tables + physics), per operator:")
    print(f"  {'overall':<26}{_fmt(kf['overall'])}")
    for op, s in kf["per_group"].items():
        print(f"  {op:<26}{_fmt(s)}")
    print("\nLeave-one-model-out (physics only: the held-out model predicted from its shape):")
    all_op = []
    all_layer = []
    for model, res in lomo.items():
        print(f"  {model}")
        print(f"    {'layer total':<24}{_fmt(res['layer_total'])}")
        print(f"    {'all operators':<24}{_fmt(res['overall'])}")
        for op, s in res["per_group"].items():
            print(f"      {op:<22}{_fmt(s)}")
        all_op.append(res["overall"]["median_ape"])
        all_layer.append(res["layer_total"]["median_ape"])
    print(f"\nheadline: k-fold median {kf['overall']['median_ape']:.2f}%; leave-one-model-out median "
          f"(mean over held-out models) layer total {np.mean(all_layer):.2f}%, operators {np.mean(all_op):.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
