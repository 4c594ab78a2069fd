"""Measure → fit → predict held-out points, for FSDP2 on this machine's CPU.

Runs ``srl-profile fsdp`` (gloo, one process per rank, the ``simrl/tiny-llama`` model built in
code) over a grid of world sizes and sequence lengths, fits the ``fsdp`` training family on the
points that are *not* held out, and prints the error on the held-out ones: a world size and a
sequence length that the fit never saw (every point with either is held out).

Run: ``.venv/bin/python benchmarks/fsdp_profile.py [--obs FILE | --save FILE] [--json]`` (needs
torch; ``--obs`` reuses a file instead of profiling, ``--save`` keeps the observations).

How the CPU measurement stays steady on a shared machine (see adapters/fsdp.py):

- ``--clock process``: each rank's CPU seconds, so ranks that outnumber the cores, or other work
  on the machine, do not count as step time (waiting is not counted); the median over ranks;
- ``--schedule interleaved`` (the CPU default): every world's ranks start at once and the worlds
  take turns step by step, so a load that comes and goes falls on every world alike;
- the timed steps of a world go round robin over the sequence lengths; the value is their median.

The fit needs no ``--gpu``: the observations say they come from a CPU and the family's features
are scaled by the catalog's ``CPU`` entry (simrl/cost/catalog/gpus.yaml).
"""

from __future__ import annotations

import json
import sys

from simrl.cost.fit import evaluate, fit_artifact
from simrl.cost.observations import read_observations

GRID_WORLDS = (1, 2, 3, 4)
GRID_SEQS = (32, 64, 128, 256)
HELD_WORLDS = (3,)
HELD_SEQS = (128,)
STEPS, WARMUP = 4, 1
# The srl-profile fsdp arguments of the grid (the test and examples/profile/fsdp.sh run the same).
PROFILE_ARGS = ["--world-sizes", ",".join(map(str, GRID_WORLDS)), "--seq-lens", ",".join(map(str, GRID_SEQS)),
                "--steps", str(STEPS), "--warmup", str(WARMUP), "--clock", "process", "--start-method", "fork"]


def split(obs, held_worlds=HELD_WORLDS, held_seqs=HELD_SEQS):
    """(train, held-out): a point is held out when its world size or its sequence length is."""
    def held(o):
        return int(o.inputs["dp"]) in held_worlds or int(o.inputs["seq_lens"][0]) in held_seqs

    return [o for o in obs if not held(o)], [o for o in obs if held(o)]


def heldout(obs, held_worlds=HELD_WORLDS, held_seqs=HELD_SEQS) -> dict:
    """Fit ``fsdp`` on the kept points; median / mean / max % error on the held-out ones."""
    train, test = split(obs, held_worlds, held_seqs)
    if not train or not test:
        raise ValueError("the grid leaves nothing to fit on or nothing held out")
    art = fit_artifact("fsdp", train)
    res = evaluate(art, test)
    return {"held_worlds": list(held_worlds), "held_seqs": list(held_seqs), "n_train": len(train),
            "n_test": len(test), "time": res["per_group"]["step_time"],
            "memory": res["per_group"].get("step_memory"), "coefficients": art["coefficients"]}


def profile(steps: int = STEPS, warmup: int = WARMUP):
    from adapters.fsdp import FsdpPlan, profile_fsdp

    plan = FsdpPlan(world_sizes=GRID_WORLDS, seq_lens=GRID_SEQS, steps=steps, warmup=warmup, clock="process",
                    start_method="fork")
    return profile_fsdp(plan, progress=lambda line: print(line, file=sys.stderr)).observations


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    obs = read_observations(argv[argv.index("--obs") + 1]) if "--obs" in argv else profile()
    if "--save" in argv:
        from simrl.cost.observations import write_observations

        write_observations(argv[argv.index("--save") + 1], obs)
    worlds = sorted({int(o.inputs["dp"]) for o in obs})
    seqs = sorted({int(o.inputs["seq_lens"][0]) for o in obs})
    out = {"interpolate": heldout(obs)}
    if len(worlds) > 2 and len(seqs) > 2:  # the largest world and length: beyond what the fit saw
        out["extrapolate"] = heldout(obs, (worlds[-1],), (seqs[-1],))
    if as_json:
        print(json.dumps(out, indent=1))
        return 0
    for name, r in out.items():
        t, m = r["time"], r["memory"]
        print(f"{name}: fit on {r['n_train']} observations, held out world {r['held_worlds']} and "
              f"seq_len {r['held_seqs']} ({r['n_test']} observations)")
        print(f"  step time   median {t['median_ape']:5.1f}%  mean {t['mean_ape']:5.1f}%  max {t['max_ape']:5.1f}%")
        if m:
            print(f"  peak memory median {m['median_ape']:5.1f}%  mean {m['mean_ape']:5.1f}%  max {m['max_ape']:5.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
