"""Every reason the fast path refuses each preset at its defaults, not only the first.

``python -m simrl_fast.coverage`` prints the table of docs/fastpath.md ("Presets at their defaults");
tests/fast/test_coverage.py checks that the docs hold exactly the table printed here, so it stays true.

`check_supported` raises at its first unsupported feature. To see the next ones, each reason it
gives is removed by the override in `FIXES` that sets that feature to its supported value, and
the check runs again.
The policy's own reasons are `lowering.policy_rejections` of its lowered record (all of them).
Numpy only (no jax), like `lowering`.
"""

from __future__ import annotations

import attrs

from simrl.config import load_config
from simrl.cost.build import build_costs
from simrl.engine.sim import load_workload
from simrl.policy.params import LoweringContext
from simrl.policy.registry import policy_kinds
from simrl_fast.lowering import (
    FastPathNoProgress,
    FastPathUnsupported,
    check_supported,
    lower,
    policy_rejections,
)

#: (text of a check_supported reason, the override that sets the feature to a supported value)
FIXES = (
    ("deployment.rollout.kv_policy=", "deployment.rollout.kv_policy=reserve"),
    ("deployment.rollout.max_num_batched_tokens=", "deployment.rollout.max_num_batched_tokens=0"),
    ("deployment.rollout.prefix_caching=true", "deployment.rollout.prefix_caching=false"),
    ("deployment.placement=", "deployment.placement=disaggregated"),
    ("router.name=", "router.name=least_requests"),
    ("router.active_cap=", "router.active_cap=0"),
    ("run.time_horizon_s=", "run.time_horizon_s=inf"),
)

_PREFIX, _SUFFIX = "simrl_fast does not support ", "; use the SimPy engine"


def short(msg: str) -> str:
    """A rejection without the common prefix and suffix."""
    return msg.removeprefix(_PREFIX).removesuffix(_SUFFIX)


@attrs.frozen
class Coverage:
    kind: str
    config: tuple[str, ...]  # check_supported's reasons, in order
    fixes: tuple[str, ...]  # the overrides that remove them
    policy: tuple[str, ...]  # policy_rejections of the lowered record
    fixed: str  # what `lower` says once ``fixes`` are applied: "runs", or its reason


def coverage(kind: str, overrides: tuple[str, ...] = ()) -> Coverage:
    """Every reason `simrl_fast.lower` refuses ``policy=kind`` (plus ``overrides``) at the defaults."""
    base = [f"policy={kind}", *overrides]
    cfg = load_config(overrides=base)
    wl = load_workload(cfg)
    ctx = LoweringContext(group_size=int(wl.group_traj_start[1] - wl.group_traj_start[0]),
                          instances=cfg.deployment.rollout.instances)
    record = cfg.policy.lower(ctx)
    gaps = tuple(getattr(cfg.policy, "fast_path_gaps", ()))
    policy = tuple(short(m).removesuffix(f" (policy {kind!r})")
                   for m in policy_rejections(record, f"policy {kind!r}", gaps))
    config, fixes = [], []
    while True:
        cfg = load_config(overrides=[*base, *fixes])
        costs = build_costs(cfg)
        try:
            check_supported(cfg, wl, costs)
            break
        except FastPathUnsupported as exc:
            msg = short(str(exc))
            fix = next((f for text, f in FIXES if text in msg and f not in fixes), None)
            config.append(msg)
            if fix is None:  # no known fix: the later checks are not reached
                break
            fixes.append(fix)
    try:
        lower(cfg, wl, costs)
        fixed = "runs"
    except (FastPathUnsupported, FastPathNoProgress) as exc:
        fixed = short(str(exc)).removesuffix(f" (policy {kind!r})")
    return Coverage(kind, tuple(config), tuple(fixes), policy, fixed)


def presets() -> list[str]:
    return sorted(k for k in policy_kinds() if not k.startswith("_"))


def table() -> str:
    """The markdown table of docs/fastpath.md, one row per registered policy at its defaults."""
    rows = ["| preset | configuration (`check_supported`, in order) | policy record (`policy_rejections`) "
            "| with the configuration fixed |",
            "|---|---|---|---|"]
    for kind in presets():
        c = coverage(kind)
        cell = lambda xs: "; ".join(xs) if xs else "—"  # noqa: E731
        fixed = "runs" if c.fixed == "runs" else f"refused: {c.fixed}"
        if c.fixes:
            fixed += " (with " + ", ".join(f"`{f}`" for f in c.fixes) + ")"
        rows.append(f"| `{kind}` | {cell(c.config)} | {cell(c.policy)} | {fixed} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(table(), end="")
