"""One question for every preset: "bound staleness at N versions".

`staleness_overrides(kind, n)` answers it with each preset's own knob, at its nearest meaning,
and says which knob it set (`srl --staleness N`, or the shorthand `staleness=N`). A preset
without a per-sample bound (verl's ``staleness_threshold`` is a sample budget; slime has no
bound above 1) is told as such: `StalenessAnswer.bounded` is false and the run's report gives
the staleness actually reached (``staleness_max``).

Staleness here is the report's: the version trained from minus the oldest version that produced
any token of the group (docs/model.md, "Trainer and batches").
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

import attrs

from simrl.policy.errors import PolicyError


@attrs.frozen
class StalenessAnswer:
    """The overrides that set a preset's bound to N, and what they mean."""

    kind: str
    n: int
    overrides: tuple[str, ...]  # ``policy.<knob>=<value>`` strings, applied after the user's own
    note: str  # which knob, and how it relates to N
    bounded: bool = True  # False: the preset has no per-sample bound at this setting

    def message(self) -> str:
        knobs = " ".join(self.overrides)
        tail = "" if self.bounded else " (no per-sample bound: see the reached staleness_max)"
        return f"staleness={self.n} for {self.kind}: {knobs} -- {self.note}{tail}"


def _at_least(n: int, lo: int, knob: str) -> tuple[int, str]:
    if n >= lo:
        return n, ""
    return lo, f"; {knob} cannot be below {lo}, the nearest bound is {lo}"


def staleness_overrides(kind: str, n: int) -> StalenessAnswer:
    """The overrides that bound preset ``kind``'s staleness at ``n`` versions (nearest meaning)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise PolicyError(f"staleness must be an integer >= 0, got {n!r}")

    def ans(overrides, note, bounded=True):
        return StalenessAnswer(kind, n, tuple(f"policy.{o}" for o in overrides), note, bounded)

    if kind == "psrl":
        return ans([f"staleness={n}"], "psrl.staleness (eta): buffers [V_traj, V_traj+eta], held by construction")
    if kind == "areal":
        return ans([f"max_head_offpolicyness={n}"],
                   "AReaL max_head_offpolicyness: an admission bound; an overtaken straggler can exceed it (counted)")
    if kind == "roll":
        if n == 0:
            return ans(["async_generation_ratio=0.0"], "ROLL async_generation_ratio=0: synchronous")
        return ans([f"async_generation_ratio={float(n)}"],
                   "ROLL async_generation_ratio r: get_batch reads steps >= v - ceil(r), older work is GC-aborted")
    if kind == "skyrl":
        return ans([f"max_staleness_steps={n}"],
                   "SkyRL max_staleness_steps: admission capacity; an overtaken group is trained and counted")
    if kind == "verl_v1":
        return ans(["trainer_mode=separate_async", f"max_off_policy_threshold={n + 1}"],
                   "verl V1 max_off_policy_threshold counts the version trained too: threshold = N + 1, "
                   "separate_async (the threshold only acts in an async mode)")
    if kind == "nemo_rl":
        v, extra = _at_least(n, 1, "max_trajectory_age_steps")
        return ans([f"max_trajectory_age_steps={v}"], "NeMo-RL max_trajectory_age_steps: target-step window" + extra)
    if kind == "trl":
        return ans(["mode=async", f"max_staleness={n}"],
                   "TRL async max_staleness: dispatch-stamped groups older than N dropped at consumption")
    if kind == "prime_rl":
        return ans([f"max_off_policy_steps={n}"], "prime-rl max_off_policy_steps: finished groups older than N dropped")
    if kind == "art":
        return ans([f"max_steps_off_policy={n}"], "ART max_steps_off_policy: older groups discarded")
    if kind == "openrlhf":
        v, extra = _at_least(n, 1, "async_queue_size")
        return ans([f"async_queue_size={v}"], "OpenRLHF async_queue_size Q: batch b is dispatched at version >= b-Q"
                   + extra)
    if kind == "dressage":
        return ans([f"dressage_staleness_keep_versions={n + 1}"],
                   "Dressage keeps a group only if all its tokens are among the last K versions: K = N + 1")
    if kind == "bounded_async":
        return ans([f"max_staleness={n}"], "bounded_async max_staleness")
    if kind == "sync":
        if n == 0:
            return ans([], "sync is on-policy: staleness 0 already")
        raise PolicyError(f"staleness={n}: policy 'sync' is on-policy (staleness 0); "
                          "use policy=bounded_async for a bound of N")
    if kind == "verl":
        return ans(["mode=fully_async", f"staleness_threshold={float(n)}"],
                   "verl staleness_threshold is a sample budget, not a version bound: it lets "
                   "(1 + threshold) x window samples be generated ahead; threshold = N is the nearest reading",
                   bounded=False)
    if kind == "slime":
        if n == 0:
            return ans(["mode=sync"], "slime sync: rollout and training alternate (staleness 0)")
        return ans(["mode=train_async"],
                   "slime has no per-sample bound knob; train_async (one rollout ahead) keeps staleness <= 1"
                   + ("" if n == 1 else f", the nearest mode within {n}"),
                   bounded=(n == 1))
    raise PolicyError(f"staleness={n}: policy {kind!r} does not say how to bound its staleness")


_SECTIONS = ("policy", "deployment", "workload", "router", "cost", "run")


def _did_you_mean(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def resolve_staleness(overrides, n: int | None, kind_of: Callable[[list[str]], str]):
    """The command line's staleness question: ``--staleness N`` or the shorthand ``staleness=N``.

    Returns the overrides to load (the shorthand removed, the preset's knobs appended) and the
    `StalenessAnswer`, or None when no staleness was asked. The preset is the one the rest of
    the command line selects (``kind_of(overrides)``, e.g. the loaded configuration's
    ``policy.kind``); a user override of a knob the answer sets is refused (`PolicyError`).
    """
    rest = []
    for ov in overrides:
        key, eq, raw = ov.partition("=")
        key = key.strip()
        if eq and "." not in key and key not in (*_SECTIONS, "staleness") and _did_you_mean(key, ["staleness"]):
            raise PolicyError(f"override {ov!r}: unknown key{_did_you_mean(key, ['staleness', *_SECTIONS])}; "
                              f"known: staleness, {', '.join(_SECTIONS)}")
        if eq and key == "staleness":
            try:
                val = int(raw.strip())
            except ValueError:
                raise PolicyError(f"override {ov!r}: staleness expects an integer >= 0") from None
            if n is not None and val != n:
                raise PolicyError(f"staleness given twice ({n} and {val}); give it once")
            n = val
        else:
            rest.append(ov)
    if n is None:
        return list(overrides), None
    kind = kind_of(rest)
    answer = staleness_overrides(kind, n)
    mine = {o.partition("=")[0] for o in answer.overrides}
    clash = [ov for ov in rest if ov.partition("=")[0].strip() in mine]
    if clash:
        raise PolicyError(f"{', '.join(clash)} conflicts with staleness={n}, which sets "
                          f"{' '.join(answer.overrides)}; give one or the other")
    return rest + list(answer.overrides), answer
