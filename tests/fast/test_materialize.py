"""The step's two compiler-shaping helpers give exactly the values they stand for (docs/fastpath.md, "Speed,
session 9"): `state.materialize` is the identity, bit for bit; `state.row_min` is the minimum of the row."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402

from simrl_fast import engine  # noqa: E402,F401  (float64 on)
from simrl_fast.state import KEY_EMPTY, REDUCE_SPAN, materialize, row_min  # noqa: E402


def test_materialize_is_the_identity_bit_for_bit():
    f = np.array([0.0, -0.0, np.nan, -np.inf, np.inf, 1e-308, -3.5])
    got = np.asarray(jax.jit(jax.vmap(materialize))(f))
    assert got.tobytes() == f.tobytes()  # NaN stays NaN, -0.0 stays -0.0 (max(x, -inf) is x)
    i32 = np.array([np.iinfo(np.int32).min, -1, 0, 7, np.iinfo(np.int32).max], np.int32)
    assert np.asarray(jax.jit(materialize)(i32)).tolist() == i32.tolist()
    i64 = np.array([KEY_EMPTY, np.iinfo(np.int64).min, 3], np.int64)
    assert np.asarray(jax.jit(materialize)(i64)).tolist() == i64.tolist()
    b = np.array([True, False, True])
    out = jax.jit(materialize)(b)
    assert out.dtype == jnp.bool_ and np.asarray(out).tolist() == [True, False, True]
    assert int(jax.jit(materialize)(jnp.int32(5))) == 5  # a scalar


@pytest.mark.parametrize("n", [1, REDUCE_SPAN - 1, REDUCE_SPAN, REDUCE_SPAN + 1, 2 * REDUCE_SPAN, 100, 256, 1100])
def test_row_min_is_the_minimum_of_each_row(n):
    rng = np.random.default_rng(n)
    keys = rng.integers(0, 2**40, (5, 3, n)).astype(np.int64)
    keys[0, 0] = KEY_EMPTY  # an empty row: every slot free
    keys[1, 2, -1] = 0  # the minimum in the padded last slice
    keys[2, 1, 0] = -5
    assert np.array_equal(np.asarray(jax.jit(row_min)(keys)), keys.min(-1))
    slots = rng.integers(0, n + 1, (4, n)).astype(np.int32)
    assert np.array_equal(np.asarray(jax.jit(row_min)(slots)), slots.min(-1))
    x = rng.normal(size=(2, n))
    x[1, n // 2] = -np.inf
    assert np.array_equal(np.asarray(jax.jit(row_min)(x)), x.min(-1))
