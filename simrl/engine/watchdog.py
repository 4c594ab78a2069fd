"""Deadlock diagnosis: when no event is left but training is unfinished, say what is stuck."""

from __future__ import annotations

from collections.abc import Sequence

from simrl.engine.groups import GroupBook
from simrl.engine.instance import Instance
from simrl.engine.router import Router


def diagnose(cfg, now: float, book: GroupBook, router: Router, instances: Sequence[Instance], trainer_phase: str,
             horizon_reached: bool) -> str:
    st, policy = book.st, book.policy
    lines = []
    if horizon_reached:
        lines.append(
            f"time horizon {cfg.run.time_horizon_s:g} s reached after {st.steps_done} of "
            f"{cfg.run.training_steps} training steps"
        )
    else:
        lines.append(
            f"no progress possible at t={now:.3f} s after {st.steps_done} of "
            f"{cfg.run.training_steps} training steps (nothing left to happen)"
        )
    lines.append(f"trainer: {trainer_phase}; buffer holds {len(st.buffer)} finished groups")
    admit = policy.admit(st)
    lines.append(
        f"policy {policy.kind}: admission {'open' if admit else 'closed'} at version {st.version} "
        f"({st.groups_dispatched} dispatched, {st.groups_accepted} accepted, {st.n_running} running, "
        f"{st.groups_dropped} dropped){'; dispatch paused for a weight update' if book.dispatch_paused else ''}"
    )
    q = router.queue
    if q:
        head = q[0]
        lines.append(
            f"router: {len(q)} calls queued; head (group {head.group.wg}, trajectory {head.traj.tid}, "
            f"turn {head.turn}) has no eligible instance"
            + (f" (active_cap={cfg.router.active_cap})" if cfg.router.active_cap else "")
        )
    for inst in instances:
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
