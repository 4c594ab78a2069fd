"""The two declared rule sets of a policy: how weights reach rollout (`Sync`) and how stale a
trained group may be (`Staleness`). Both are frozen values; the engine enforces them
(`simrl.engine.weights`, `simrl.engine.staleness`) and the fast path lowers the same values.

Every enum's numeric code for the fast path is its position in the enum (`code`), so the
codes are written once, here.
"""

from __future__ import annotations

import enum

import attrs


class InflightRule(enum.StrEnum):
    """What a weight publication does to requests that are generating."""

    CONTINUE = "continue"  # keep running on the weights they started with; no pause (versioned LoRA)
    KEEP_PAUSE = "keep_pause"  # pause for the sync keeping KV; continue on the new weights
    ABORT_RESUME = "abort_resume"  # abort, keep generated tokens, re-prefill them on the new weights
    ABORT_RESTART = "abort_restart"  # abort, discard generated tokens, restart the call from scratch
    DRAIN = "drain"  # stop starting requests, let in-flight ones finish, then sync
    SWAP_IN_PLACE = "swap_in_place"  # no pause: the transfer overlaps generation, then running requests
    # continue on the new weights (ART's in_flight_lora)


class Enforcement(enum.StrEnum):
    """How a policy keeps trained groups within its staleness bound."""

    NONE = "none"  # no bound
    COUNTED = "counted"  # upstream only counts groups past the bound (reported as violations)
    ADMISSION = "admission"  # admission alone keeps every group within the bound
    DROP_AT_COMPLETION = "drop_at_completion"  # a group staler than the bound when it finishes is dropped
    DROP_AT_CONSUMPTION = "drop_at_consumption"  # the policy drops stale groups when it forms a batch
    POLICY = "policy"  # the policy's own filter hooks keep the bound (a rule the engine does not know)


class SyncScope(enum.StrEnum):
    GLOBAL = "global"  # every instance takes the new weights at once
    PER_INSTANCE = "per_instance"  # each instance pulls on its own (PSRL)


class Placement(enum.StrEnum):
    DISAGGREGATED = "disaggregated"
    COLOCATED = "colocated"


def code(member: enum.Enum) -> int:
    """The fast path's integer code of an enum member: its position in the enum."""
    return list(type(member)).index(member)


def _opt_placement(value) -> Placement | None:
    return None if value is None else Placement(value)


@attrs.frozen
class Sync:
    """How a new weight version reaches rollout."""

    rule: InflightRule = attrs.field(default=InflightRule.KEEP_PAUSE, converter=InflightRule)
    scope: SyncScope = attrs.field(default=SyncScope.GLOBAL, converter=SyncScope)
    #: None: the deployment's placement; otherwise the system mode fixes it
    placement: Placement | None = attrs.field(default=None, converter=_opt_placement)
    #: drop cached prefixes when an instance loads new weights (vLLM reset_prefix_cache, or a
    #: per-version cache salt: either way old-version prefixes are never hit again)
    clear_prefix_cache: bool = True

    @property
    def pauses_rollout(self) -> bool:
        """Whether generation stops while the weights are transferred."""
        return self.rule not in (InflightRule.CONTINUE, InflightRule.SWAP_IN_PLACE)


@attrs.frozen
class Staleness:
    """The staleness a policy promises for trained groups, and who keeps the promise.

    With ``DROP_AT_COMPLETION`` the engine drops a finished group staler than ``bound``; with
    ``evict_on_publish`` it also evicts buffered groups that aged past ``bound`` at each
    publication. Other enforcements are the policy's own (admission, its batch hook) or none.
    """

    bound: int | None = None
    enforcement: Enforcement = attrs.field(default=Enforcement.NONE, converter=Enforcement)
    evict_on_publish: bool = False

    def __attrs_post_init__(self):
        if (self.bound is None) != (self.enforcement is Enforcement.NONE):
            raise ValueError(f"staleness bound {self.bound} with enforcement {self.enforcement.value}: "
                             "a bound needs an enforcement other than none, and none needs no bound")
        if self.evict_on_publish and self.bound is None:
            raise ValueError("evict_on_publish needs a staleness bound")

    @property
    def enforced(self) -> bool:
        """False where upstream only counts groups past the bound (they are reported)."""
        return self.enforcement is not Enforcement.COUNTED
