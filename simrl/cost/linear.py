"""Linear cost models: the closed-form family the analytic tests and the fast path rely on.

`LinearRollout`: one iteration takes ``a + b*batch + c*kv_tokens + p*prefill_tokens`` seconds
(DistServe-style decode plus a per-token prefill term); KV capacity is given in tokens.
`ConstantTraining`: a step takes ``a + per_token*tokens`` seconds. `ConstantSync`: a fixed
publication time. They answer every query (their validity domain is unbounded) and are exact
enough to write closed-form oracles against.
"""

from __future__ import annotations

import attrs

from simrl.cost.base import ValidityDomain


@attrs.define
class LinearRollout:
    a: float = 0.005  # seconds per iteration
    b: float = 2e-5  # seconds per running sequence
    c: float = 1e-8  # seconds per resident KV token
    p: float = 5e-5  # seconds per prefilled token
    kv_tokens: int = 1_000_000
    domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("rollout/linear"))

    def iteration_time(self, batch_size: int, kv_tokens: int, prefill_tokens: int) -> float:
        return self.a + self.b * batch_size + self.c * kv_tokens + self.p * prefill_tokens

    def kv_capacity_tokens(self) -> int:
        return self.kv_tokens


@attrs.define
class ConstantTraining:
    a: float = 10.0  # seconds per step
    per_token: float = 0.0  # seconds per trained token (prompt + completion)
    capacity_bytes: float = 80e9
    domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("training/constant"))

    def step_time(self, seq_lens: list[int]) -> float:
        return self.a + self.per_token * sum(seq_lens)

    def peak_memory_bytes(self, seq_lens: list[int]) -> float:
        return 0.0

    def memory_capacity_bytes(self) -> float:
        return self.capacity_bytes


@attrs.define
class ConstantSync:
    seconds: float = 1.0
    domain: ValidityDomain = attrs.field(factory=lambda: ValidityDomain("weight_sync/constant"))

    def publish_time(self, n_instances: int) -> float:
        return self.seconds
