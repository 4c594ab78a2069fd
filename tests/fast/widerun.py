"""Run `widecases.wide_case` configurations on both engines in vmapped batches and compare them.

Case i of seed s is drawn from ``np.random.default_rng([s, i])``, so any case is reproduced alone
(``python tests/fast/widerun.py --seed s --only i``). Used by tests/fast/test_wide_differential.py
and by hand for long runs:

    PYTHONPATH=tests:tests/fast python tests/fast/widerun.py --seed 1 --count 200
"""

from __future__ import annotations

import argparse
import time
import traceback
from types import SimpleNamespace

import numpy as np
from diffcases import compare
from widecases import lowered_or_reason, wide_case

GROUPS, N, STEPS = 8, 4, 3


def draw(seed: int, i: int, groups=GROUPS, n=N, steps=STEPS, policy_kind=None):
    from simrl.cost.base import CostModelError

    rng = np.random.default_rng([seed, i])
    while True:  # a layout whose model does not fit its GPUs is redrawn (the cost model refuses it)
        try:
            return wide_case(rng, groups, n, steps, policy_kind=policy_kind)
        except CostModelError:
            continue


def _static(params, wa, min_groups: int = 64, min_batch: int = 8):
    """Shapes in a few buckets (group slots a power of two, batches 8 or 64, both formulas, per-instance sync), so
    batches and single examples share compiles."""
    from simrl_fast.lowering import static_for

    need = static_for(params, wa)
    mg = max(min_groups, 1 << (need.max_groups - 1).bit_length())
    s = static_for(params, wa, mg)
    # (per-instance sync traced always: a configuration without it runs as before, and one shape serves both)
    return s._replace(instances=4, slots=64, max_batch=max(min_batch, 8 if s.max_batch <= 8 else 64), formulas=3,
                      perinst=True)


def run_cases(cases, idx, rel: float = 0.0, min_groups: int = 64, min_batch: int = 8) -> dict:
    """Compare every case on both engines (times to ``rel``, the documented tolerance; everything else
    exactly); return counts, the worst relative time errors, the cases whose times were not
    bit-identical, and the failures as (index, label, message)."""
    from simrl_fast.engine import _check_collapse, run_params
    from simrl_fast.lowering import FastPathUnsupported

    out = {"run": 0, "refused": 0, "refused_after": 0, "simpy_error": 0, "failures": [], "reasons": {},
           "worst": 0.0, "inexact": 0}
    todo = []
    for i, c in zip(idx, cases, strict=True):
        low = lowered_or_reason(c)
        if isinstance(low, str):
            out["refused"] += 1
            key = low.split(";")[0][:120]
            out["reasons"][key] = out["reasons"].get(key, 0) + 1
            continue
        try:
            c.run_simpy()
            c.simpy_error = None
        except Exception as exc:  # noqa: BLE001  (a SimPy stop, e.g. the collapse failsafe, is compared below)
            c.simpy_error = exc
        todo.append((i, c, low))
    if not todo:
        return out
    params = [low[1]._replace(collapse=np.int32(0)) for _, _, low in todo]
    was = [low[2] for _, _, low in todo]
    res = run_params(params, was, static=_static(params, was[0], min_groups, min_batch), stops=False)
    for m, (i, c, low) in enumerate(todo):
        p = low[1]
        refused_after = False
        if int(p.collapse):
            try:
                _check_collapse([p], [low[2]], SimpleNamespace(group_finish=res.group_finish[m:m + 1]), None)
            except FastPathUnsupported:
                refused_after = True
        if c.simpy_error is not None:
            if refused_after:
                out["refused_after"] += 1
                continue
            out["simpy_error"] += 1
            out["failures"].append((i, c.label, f"SimPy raised {type(c.simpy_error).__name__}: {c.simpy_error}"))
            continue
        if refused_after:
            out["refused_after"] += 1
            continue
        out["run"] += 1
        try:
            w = compare(c, res, m, rel=rel)
            worst = max(w.values())
            out["worst"] = max(out["worst"], worst)
            out["inexact"] += worst > 0
        except AssertionError as exc:
            out["failures"].append((i, c.label, str(exc)[:600]))
        except Exception:  # noqa: BLE001
            out["failures"].append((i, c.label, traceback.format_exc()[-600:]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--only", type=int, default=None)
    ap.add_argument("--kind", default=None)
    ap.add_argument("--budget-s", type=float, default=540.0)
    a = ap.parse_args()
    t0 = time.time()
    ids = [a.only] if a.only is not None else list(range(a.start, a.start + a.count))
    total = {"run": 0, "refused": 0, "refused_after": 0, "simpy_error": 0, "failures": [], "reasons": {},
             "worst": 0.0, "inexact": 0}
    for k in range(0, len(ids), a.batch):
        if time.time() - t0 > a.budget_s:
            print(f"budget reached after case {ids[k] - 1}")
            break
        chunk = ids[k:k + a.batch]
        cases = [draw(a.seed, i, policy_kind=a.kind) for i in chunk]
        r = run_cases(cases, chunk)
        total["worst"] = max(total["worst"], r["worst"])
        for key in ("run", "refused", "refused_after", "simpy_error", "inexact"):
            total[key] += r[key]
        total["failures"] += r["failures"]
        for key, v in r["reasons"].items():
            total["reasons"][key] = total["reasons"].get(key, 0) + v
        print(f"cases {chunk[0]}..{chunk[-1]}: {r['run']} compared, {r['refused']} refused, "
              f"{len(r['failures'])} failures ({time.time() - t0:.0f} s)", flush=True)
    print({k: v for k, v in total.items() if k not in ("failures", "reasons")})
    for key, v in sorted(total["reasons"].items(), key=lambda kv: -kv[1]):
        print(f"  refused x{v}: {key}")
    for i, label, msg in total["failures"]:
        print(f"FAIL seed={a.seed} case={i} [{label}]\n   {msg}")


if __name__ == "__main__":
    main()
