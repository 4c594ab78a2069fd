"""Rule twins: the jnp admission rule of the fast path equals `simrl.policy.record.admits`."""

import math
from types import SimpleNamespace

import pytest

jnp = pytest.importorskip("jax.numpy")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import simrl_fast.engine  # noqa: E402, F401  (turns on float64, as every fast-path run does)
from simrl.policy.base import PipelineState  # noqa: E402
from simrl.policy.params import PolicyParams  # noqa: E402
from simrl.policy.record import admits  # noqa: E402
from simrl_fast.state import T_DONE  # noqa: E402
from simrl_fast.step import can_dispatch  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(conc=st.sampled_from([math.inf, 1.0, 3.0, 8.0]), base=st.sampled_from([math.inf, 2.0, 4.0, 9.0]),
       per_version=st.sampled_from([0.0, 1.0, 4.0]), count_dispatched=st.integers(0, 1),
       block=st.integers(0, 1), version=st.integers(0, 4), dispatched=st.integers(0, 30),
       accepted=st.integers(0, 20), running=st.integers(0, 10), training=st.booleans())
def test_can_dispatch_is_the_record_admission_rule(conc, base, per_version, count_dispatched, block, version,
                                                  dispatched, accepted, running, training):
    pp = PolicyParams(admit_concurrency_groups=conc, admit_budget_base_groups=base,
                      admit_budget_per_version_groups=per_version, admit_count_dispatched=count_dispatched,
                      admit_block_while_training=block)
    view = PipelineState(n_instances=1, version=version, groups_dispatched=dispatched, groups_accepted=accepted,
                         training=training, running={g: None for g in range(running)})
    p = SimpleNamespace(conc=jnp.float64(conc), budget_base=jnp.float64(base),
                        budget_per_version=jnp.float64(per_version), count_dispatched=jnp.int32(count_dispatched),
                        block_training=jnp.int32(block))
    s = SimpleNamespace(dispatched=jnp.int32(dispatched), accepted=jnp.int32(accepted), n_running=jnp.int32(running),
                        version=jnp.int32(version), dispatch_paused=jnp.bool_(False), training=jnp.bool_(training),
                        trainer=SimpleNamespace(phase=jnp.int32(T_DONE - 1)), overflow=jnp.bool_(False))
    assert bool(can_dispatch(s, p)) == admits(pp, view)
