"""Mutable records the engine tracks for each call in flight (docs/model.md, "Entities")."""

from __future__ import annotations

import attrs

from simrl.policy.base import GroupRecord, TrajRecord


@attrs.define(eq=False)
class Request:
    """One model call of one trajectory, from router arrival to its last token.

    A request may be preempted (KV ran out) or aborted (weight update) and admitted again;
    ``seg_base`` counts the tokens it already holds when a new segment starts.
    """

    rid: int  # arrival serial number (tie-break key)
    group: GroupRecord
    traj: TrajRecord
    turn: int  # call index within the trajectory
    call: int  # workload call index
    prompt_tokens: int  # whole prompt, history included
    new_tokens: int  # appended since the previous call (== prompt for turn 0)
    shared_tokens: int  # group-shared prompt prefix (turn 0 only, 0 when salted)
    completion_tokens: int  # forced length L
    salted: bool
    arrival: float
    generated: int = 0  # tokens produced so far (kept across abort-resume and preemption)
    instance: int = -1  # instance it is assigned to, -1 while in the router queue
    # -- per segment (one admission on an instance) --
    prefill_remaining: int = 0  # uncached prompt tokens still to prefill this segment
    prefill_total: int = 0  # uncached prompt tokens this segment started with
    seg_first_it: int = -1  # instance iteration whose end yields this segment's first token
    seg_base: int = 0  # tokens generated before this segment
    private_kv: int = 0  # KV tokens charged to this request alone (not the shared prefix)
    holds_shared: bool = False  # holds a reference on its group's shared-prefix entry
    version: int = 0  # weights version its current tokens are produced with
    version_start: int | None = None
    first_token: float | None = None
    finish: float | None = None
    aborts: int = 0
    preemptions: int = 0
    reprefill_tokens: int = 0  # prompt + generated tokens prefilled again after abort/preemption
    admit_serial: int = 0  # order of admission on its instance (newest is preempted first)
    segment: int = 0  # admissions so far; finish-heap entries of older segments are stale

    @property
    def remaining(self) -> int:
        return self.completion_tokens - self.generated

    @property
    def context_tokens(self) -> int:
        """Prompt plus generated tokens: what a resumed request must have resident."""
        return self.prompt_tokens + self.generated
