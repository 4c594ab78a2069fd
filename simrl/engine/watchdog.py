"""Deadlock diagnosis: when no event is left but training is unfinished, say what is stuck."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simrl.engine.core import Simulation


def diagnose(sim: Simulation, horizon_reached: bool) -> str:
    st = sim.st
    lines = []
    if horizon_reached:
        lines.append(
            f"time horizon {sim.cfg.run.time_horizon_s:g} s reached after {st.steps_done} of "
            f"{sim.cfg.run.training_steps} training steps"
        )
    else:
        lines.append(
            f"no progress possible at t={sim.env.now:.3f} s after {st.steps_done} of "
            f"{sim.cfg.run.training_steps} training steps (nothing left to happen)"
        )
    lines.append(f"trainer: {sim.trainer_phase}; buffer holds {len(st.buffer)} finished groups")
    admit = sim.policy.admit(st)
    lines.append(
        f"policy {sim.policy.kind}: admission {'open' if admit else 'closed'} at version {st.version} "
        f"({st.groups_dispatched} dispatched, {st.groups_accepted} accepted, {st.n_running} running, "
        f"{st.groups_dropped} dropped){'; dispatch paused for a weight update' if sim.dispatch_paused else ''}"
    )
    q = sim.router.queue
    if q:
        head = q[0]
        lines.append(
            f"router: {len(q)} calls queued; head (group {head.group.wg}, trajectory {head.traj.tid}, "
            f"turn {head.turn}) has no eligible instance"
            + (f" (active_cap={sim.cfg.router.active_cap})" if sim.cfg.router.active_cap else "")
        )
    for inst in sim.instances:
        head = inst.waiting[0] if inst.waiting else None
        why = ""
        if head is not None and not inst.running:
            why = (f"; head needs {head.prompt_tokens + head.generated} prompt tokens, "
                   f"{inst.kv_free()} of {inst.capacity} KV tokens free")
        lines.append(
            f"instance {inst.index}: version {inst.version}, {len(inst.running)} running, "
            f"{len(inst.waiting)} waiting, KV {inst.kv_used}/{inst.capacity}"
            + (" (paused)" if inst.paused else "") + why
        )
    return "\n".join(lines)
