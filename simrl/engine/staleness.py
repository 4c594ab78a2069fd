"""Where the engine keeps a policy's staleness promise (`simrl.policy.rules.Staleness`).

The one place both engines read the declared value: SimPy calls these functions (the group
book at completion, the weight keeper at publication, the report at the end) and the fast
path lowers the same value (`Policy.lower`: ``staleness_bound``, ``staleness_enforcement``,
``evict_stale_on_publish``). Staleness of a group trained at version v is v minus the oldest
weight version that produced one of its tokens.
"""

from __future__ import annotations

from collections.abc import Iterable

from simrl.policy.base import GroupRecord, PipelineState
from simrl.policy.rules import Enforcement, Staleness


def too_stale(spec: Staleness, group: GroupRecord, version: int) -> bool:
    return spec.bound is not None and group.staleness(version) > spec.bound


def drop_at_completion(spec: Staleness, group: GroupRecord, version: int) -> bool:
    """A finished group the engine drops before the policy sees it (DROP_AT_COMPLETION)."""
    return spec.enforcement is Enforcement.DROP_AT_COMPLETION and too_stale(spec, group, version)


def evict_at_publication(spec: Staleness, st: PipelineState) -> tuple[int, ...]:
    """Buffered groups that aged past the bound with the version just published."""
    if not spec.evict_on_publish:
        return ()
    return tuple(g.gid for g in st.buffer if too_stale(spec, g, st.version))


def violations(spec: Staleness, staleness: Iterable[int]) -> int:
    """Trained groups past the bound (0 whenever the engine or the policy enforces it)."""
    return 0 if spec.bound is None else sum(1 for s in staleness if s > spec.bound)
