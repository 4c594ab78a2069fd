"""Quantile sampler and counter-based field streams."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.sampling import QuantileDist, Streams, counter_hash, field_key, normal_cdf


def test_quantile_reproduces_its_knots():
    q = QuantileDist([[0, 10], [0.25, 100], [0.5, 600], [0.99, 4096], [1, 8192]])
    assert q.quantile([0, 0.25, 0.5, 0.99, 1]).tolist() == [10, 100, 600, 4096, 8192]


def test_quantile_interpolates_and_rounds_half_to_even():
    q = QuantileDist([[0, 0], [1, 3]], minimum=0)
    assert q.quantile([0.5, 1 / 6, 5 / 6]).tolist() == [2, 0, 2]  # 1.5 -> 2, 0.5 -> 0, 2.5 -> 2


def test_empirical_quantiles_match_knots():
    q = QuantileDist([[0, 32], [0.5, 600], [0.9, 2000], [1, 8192]])
    u = Streams(1, "t").uniform("x", np.arange(200_000))
    x = q.sample(u)
    assert abs(np.median(x) - 600) < 15
    assert abs(np.quantile(x, 0.9) - 2000) < 60


@pytest.mark.parametrize(
    "knots, words",
    [
        ([[0, 10]], "at least two"),
        ([[0.1, 10], [1, 20]], "first knot p must be 0"),
        ([[0, 10], [0.9, 20]], "last must be 1"),
        ([[0, 10], [0.5, 20], [0.5, 30], [1, 40]], "must exceed the previous p"),
        ([[0, 10], [0.5, 5], [1, 40]], "non-decreasing"),
        ([[0, 0], [1, 40]], "below the minimum"),
        ([[0, "a"], [1, 4]], "pairs"),
    ],
)
def test_bad_knots_are_rejected_clearly(knots, words):
    with pytest.raises(ValueError, match=words):
        QuantileDist(knots, name="my.knots")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0.001, 0.999), st.integers(1, 10_000)), min_size=0, max_size=8),
       st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=50))
def test_samples_stay_within_knots_and_are_monotone(inner, us):
    ps = sorted({round(p, 6) for p, _ in inner} - {0.0, 1.0})
    xs = sorted(x for _, x in inner)[: len(ps)]
    knots = [[0, 1], *[[p, x] for p, x in zip(ps, xs, strict=False)], [1, 20_000]]
    q = QuantileDist(knots)
    out = q.sample(sorted(us))
    assert out.min() >= 1 and out.max() <= 20_000
    assert np.all(np.diff(out) >= 0)


def test_streams_depend_only_on_coordinates():
    s = Streams(7, "w")
    g = np.arange(1000)
    whole = s.uniform("f", g, 3, 2)
    assert np.array_equal(whole[::-1], s.uniform("f", g[::-1], 3, 2))  # order-free
    assert np.array_equal(whole[500:], s.uniform("f", g[500:], 3, 2))  # prefix-free
    assert not np.array_equal(whole, s.uniform("g", g, 3, 2))  # per field
    assert not np.array_equal(whole, Streams(8, "w").uniform("f", g, 3, 2))  # per seed
    assert not np.array_equal(whole, s.uniform("f", g, 4, 2))  # per sample
    assert 0 <= whole.min() and whole.max() < 1


def test_uniforms_look_uniform_and_uncorrelated():
    s = Streams(0, "w")
    a = s.uniform("a", np.arange(100_000))
    b = s.uniform("b", np.arange(100_000))
    assert abs(a.mean() - 0.5) < 0.01 and abs(a.var() - 1 / 12) < 0.003
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.02
    assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < 0.02


def test_field_key_is_sha256_prefix_and_hash_is_stable():
    assert field_key(0, "rl_math", "prompt") == field_key(0, "rl_math", "prompt")
    assert field_key(0, "rl_math", "prompt") != field_key(0, "rl_math", "completion")
    # pinned so an accidental change of the scheme (and of every schedule) fails loudly
    assert int(counter_hash(field_key(0, "w", "f"), 0, 0, 0, 0)[()]) == PINNED_HASH


def test_normal_cdf_and_copula_marginal():
    assert abs(float(normal_cdf(np.array(0.0))) - 0.5) < 1e-7
    assert abs(float(normal_cdf(np.array(1.959964))) - 0.975) < 1e-6
    s = Streams(0, "w")
    g = np.repeat(np.arange(20_000), 8)
    smp = np.tile(np.arange(8), 20_000)
    gz = s.normal("difficulty", np.arange(20_000))[g]
    u = s.correlated_uniform("c", gz, g, smp, rho=0.6)
    assert abs(u.mean() - 0.5) < 0.01 and abs(np.quantile(u, 0.9) - 0.9) < 0.01
    uu = u.reshape(-1, 8)
    assert np.corrcoef(uu[:, 0], uu[:, 1])[0, 1] > 0.4  # samples of a group move together


PINNED_HASH = 7094652822470043398
