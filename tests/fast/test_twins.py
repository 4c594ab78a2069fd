"""Rule twins: the jnp admission rule of the fast path equals `simrl.policy.record.admits`."""

import math
from types import SimpleNamespace

import pytest

jnp = pytest.importorskip("jax.numpy")

from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import simrl_fast.engine  # noqa: E402, F401  (turns on float64, as every fast-path run does)
from simrl.policy.base import PipelineState  # noqa: E402
from simrl.policy.params import PolicyParams  # noqa: E402
from simrl.policy.record import RecordState, admits  # noqa: E402
from simrl_fast.state import T_DRAIN, T_PAUSING, T_PUBLISH, T_TRAIN, T_WAIT  # noqa: E402
from simrl_fast.step import can_dispatch  # noqa: E402


@settings(max_examples=80, deadline=None)
@given(conc=st.sampled_from([math.inf, 1.0, 3.0, 8.0]), base=st.sampled_from([math.inf, 2.0, 4.0, 9.0]),
       per_version=st.sampled_from([0.0, 1.0, 4.0]), per_batch=st.sampled_from([0.0, 2.0, 4.0]),
       count_dispatched=st.integers(0, 1), since_pub=st.integers(0, 1),
       buf_cap=st.sampled_from([math.inf, 1.0, 5.0]), block=st.integers(0, 1), version=st.integers(0, 4),
       dispatched=st.integers(0, 30), accepted=st.integers(0, 20), running=st.integers(0, 10),
       buffered=st.integers(0, 8), offset=st.integers(-20, 10), training=st.booleans(),
       phase=st.sampled_from([T_WAIT, T_TRAIN, T_PUBLISH, T_PAUSING, T_DRAIN]), step=st.integers(0, 4),
       queue=st.sampled_from([math.inf, 0.0, 2.0, 5.0]), lag=st.sampled_from([-1, -1, 0, 1, 2]),
       bmin=st.integers(1, 3), ret=st.integers(0, 1), done_drop=st.integers(0, 4), evicted=st.integers(0, 4))
# returned slots decide: accepted 3 + running 1 - evicted 2 = 2 < budget 4 admits; without the return, 4 does not
@example(conc=math.inf, base=4.0, per_version=0.0, per_batch=0.0, count_dispatched=0, since_pub=0, buf_cap=math.inf,
         block=0, version=0, dispatched=0, accepted=3, running=1, buffered=0, offset=0, training=False, phase=T_WAIT,
         step=0, queue=math.inf, lag=-1, bmin=1, ret=1, done_drop=0, evicted=2)
def test_can_dispatch_is_the_record_admission_rule(conc, base, per_version, per_batch, count_dispatched, since_pub,
                                                  buf_cap, block, version, dispatched, accepted, running, buffered,
                                                  offset, training, phase, step, queue, lag, bmin, ret, done_drop,
                                                  evicted):
    since_pub = since_pub * count_dispatched
    # admit_return_evicted (count_dispatched 0): SimPy counts dispatched - dropped, the kernel accepted + running -
    # evicted; consistent books: dispatched = accepted + running + dropped at completion, dropped = those + evicted
    ret = ret * (1 - count_dispatched)
    evicted = min(evicted, accepted)
    if ret:
        dispatched = accepted + running + done_drop
    pp = PolicyParams(admit_concurrency_groups=conc, admit_budget_base_groups=base,
                      admit_budget_per_version_groups=per_version, admit_count_dispatched=count_dispatched,
                      admit_block_while_training=block, admit_budget_per_batch_groups=per_batch,
                      admit_count_since_publish=since_pub, admit_buffer_cap_groups=buf_cap,
                      admit_queue_blocks_groups=queue, admit_max_ship_lag=lag, batch_min_groups=bmin,
                      batch_max_groups=bmin, admit_return_evicted=ret)
    # batches taken: the steps published, plus the batch being trained or published (trainer not waiting)
    rs = RecordState(batches_taken=step + (phase != T_WAIT), count_offset=offset)
    view = PipelineState(n_instances=1, version=version, groups_dispatched=dispatched, groups_accepted=accepted,
                         training=training, running={g: None for g in range(running)},
                         buffer=[None] * buffered, policy_state=rs,
                         groups_dropped=(done_drop + evicted) if ret else 0)
    p = SimpleNamespace(conc=jnp.float64(conc), budget_base=jnp.float64(base),
                        budget_per_version=jnp.float64(per_version), count_dispatched=jnp.int32(count_dispatched),
                        block_training=jnp.int32(block), budget_per_batch=jnp.float64(per_batch),
                        count_since_pub=jnp.int32(since_pub), buf_cap=jnp.float64(buf_cap),
                        queue_block=jnp.float64(queue), ship_lag=jnp.int32(lag), batch=jnp.int32(bmin),
                        return_evicted=jnp.int32(ret))
    s = SimpleNamespace(dispatched=jnp.int32(dispatched), accepted=jnp.int32(accepted), n_running=jnp.int32(running),
                        version=jnp.int32(version), dispatch_paused=jnp.bool_(False), training=jnp.bool_(training),
                        trainer=SimpleNamespace(phase=jnp.int32(phase), step=jnp.int32(step)), overflow=jnp.bool_(False),
                        buf_live=jnp.int32(buffered), count_off=jnp.int32(offset), evicted_n=jnp.int32(evicted))
    assert bool(can_dispatch(s, p)) == admits(pp, view, rs)
