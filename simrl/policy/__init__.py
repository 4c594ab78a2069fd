"""The policy seam (`simrl.policy.base`), built-in policies and the registry by name."""

from simrl.policy.base import (
    GroupRecord,
    InflightRule,
    PipelineState,
    Policy,
    PublishActions,
    TrajRecord,
    Verdict,
)
from simrl.policy.errors import PolicyError
from simrl.policy.registry import policy_class, policy_kinds, register

__all__ = [
    "GroupRecord",
    "InflightRule",
    "PipelineState",
    "Policy",
    "PolicyError",
    "PublishActions",
    "TrajRecord",
    "Verdict",
    "policy_class",
    "policy_kinds",
    "register",
]
