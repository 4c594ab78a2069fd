"""AReaL (inclusionAI/AReaL): fully asynchronous RL with interruptible generation.

Follows AReaL at ``4aef98d8``: ``areal/infra/staleness_manager.py`` (admission capacity),
``areal/infra/workflow_executor.py`` (``prepare_batch``, ``should_accept_fn``, ``dynamic_bs``),
``areal/infra/remote_inf_engine.py`` (abort on pause, resubmit the prefix), ``areal/trainer/
rl_trainer.py`` (pause, update_weights, set_version, resume), ``areal/api/cli_args.py`` (knobs).

* Admission -- ``StalenessManager.get_capacity``: a group (one workflow episode) may start while
  ``min(max_concurrent_rollouts - running, (eta + v + 1) * consumer_batch_size - (accepted +
  running)) > 0`` with ``eta = max_head_offpolicyness`` and ``v`` the current version; a rejected
  episode is not counted, so it frees capacity.
* In flight -- every weight update pauses all servers, which abort every running request
  (SGLang ``/pause_generation`` mode ``abort``); the client resubmits prompt + generated tokens
  to the same server afterwards: ``abort_resume``, global.
* Filtering -- ``should_accept_fn`` per episode (``nonzero_std``: reject groups whose rewards
  are all equal); no staleness check at consumption.
* Batch -- the first ``consumer_batch_size`` accepted episodes in completion order; with
  ``dynamic_bs`` collection stops once accepted + rejected reach the batch size, so a batch may
  be smaller.

Approximations. Upstream's default ``consumer_batch_size`` is 1 (examples set it to the train
batch size); a one-group step would make the default scenario meaningless, so the default here
is 32 groups (the default scenario's batch). ``max_concurrent_rollouts=None`` falls back to
``consumer_batch_size`` as upstream. The bound is enforced only at admission: an episode that is
overtaken by later ones (a straggler that keeps being interrupted and resumed) can be trained
with a head staleness above ``eta``. Upstream does not check, so neither does the simulation:
for ``eta > 0`` violations are counted, not prevented (enforcement ``counted``); with
``eta = 0`` admission makes the run synchronous and the bound holds exactly. ``prepare_batch``'s
extra cap on pending inputs ((eta+1)*B) is implied by the admission budget and not modelled
separately. The docs' example filter (0 < mean reward < 1) equals ``nonzero_std`` for 0/1
rewards.
"""

from __future__ import annotations

import attrs
from attrs import validators as v

from simrl.policy.base import GroupRecord, PipelineState, Verdict
from simrl.policy.params import PolicyParams
from simrl.policy.record import RecordPolicy, RecordState
from simrl.policy.registry import register
from simrl.policy.rules import Enforcement, InflightRule, code


@attrs.define
class ArealState(RecordState):
    """Groups rejected since the last batch (dynamic_bs)."""

    rejected_since_batch: int = 0


@register
@attrs.frozen
class ArealPolicy(RecordPolicy):
    """AReaL: admission by head-version capacity, abort-and-resume on every update."""

    kind = "areal"
    upstream = "inclusionAI/AReaL@4aef98d8 (areal/infra/staleness_manager.py, workflow_executor.py)"
    State = ArealState

    max_head_offpolicyness: int = attrs.field(default=0, validator=v.ge(0))
    consumer_batch_size: int = attrs.field(default=32, validator=v.gt(0))  # groups; upstream default 1
    max_concurrent_rollouts: int | None = attrs.field(default=None, validator=v.optional(v.gt(0)))
    dynamic_bs: bool = False
    should_accept_fn: str = attrs.field(default="none", validator=v.in_(("none", "nonzero_std")))

    @property
    def concurrency(self) -> int:
        return self.max_concurrent_rollouts or self.consumer_batch_size

    def record(self) -> PolicyParams:
        # Admission: min(concurrency - running, (eta + v + 1) * B - (accepted + running)) > 0.
        # Admission alone guarantees the bound only when the run is synchronous (eta = 0); past
        # that an overtaken straggler may exceed it, and it is counted.
        b, eta = self.consumer_batch_size, self.max_head_offpolicyness
        return PolicyParams(
            admit_concurrency_groups=float(self.concurrency),
            admit_budget_base_groups=float((eta + 1) * b),
            admit_budget_per_version_groups=float(b),
            inflight_rule=code(InflightRule.ABORT_RESUME),
            staleness_bound=eta,
            staleness_enforcement=code(Enforcement.ADMISSION if eta == 0 else Enforcement.COUNTED),
            drop_zero_variance=int(self.should_accept_fn == "nonzero_std"),
            batch_min_groups=b,
            batch_max_groups=b,
            # dynamic_bs: a batch may form with every buffered group once buffered + rejected
            # since the last batch reach B (the record's batch_shrink_by_drops)
            batch_shrink_by_drops=int(self.dynamic_bs),
            fast_path_exact=1,
        )

    # -- dynamic_bs: a batch may form smaller by the number of groups rejected since the last --
    def on_group_done(self, group: GroupRecord, st: PipelineState) -> Verdict:
        verdict = super().on_group_done(group, st)
        if verdict is Verdict.DROP:
            st.policy_state.rejected_since_batch += 1
        return verdict

    def form_batch(self, st: PipelineState) -> list[GroupRecord] | None:
        if not self.dynamic_bs:
            return super().form_batch(st)
        b = self.consumer_batch_size
        if len(st.buffer) >= b:
            st.policy_state.rejected_since_batch = 0
            return st.buffer[:b]
        if st.buffer and len(st.buffer) + st.policy_state.rejected_since_batch >= b:
            st.policy_state.rejected_since_batch = 0
            return list(st.buffer)
        return None
