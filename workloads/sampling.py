"""Sampling machinery: piecewise-linear quantile distributions and per-field random streams.

A length is drawn by inverse-CDF sampling from a `QuantileDist` (knots ``[(p, x), ...]``,
linear between knots, rounded half-to-even). The uniforms come from `Streams`, a counter-based
generator: every sampled field has a 64-bit key ``SHA-256("seed|workload|field")[:8]``, and the
uniform for coordinate (group, sample, turn, lane) is a splitmix64 chain over the key and the
four coordinates. A draw is therefore a pure function of (master seed, workload, group, sample,
turn, field): it does not depend on the order in which anything is generated, on how many groups
are drawn, or on any other field, and whole arrays are drawn at once with numpy uint64 arithmetic.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import attrs
import numpy as np

_GAMMA = np.uint64(0x9E3779B97F4A7C15)  # golden-ratio increment of splitmix64
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_TO_UNIT = 2.0**-53


def field_key(seed: int, workload: str, field: str) -> int:
    """The 64-bit stream key of one field: SHA-256 of ``"seed|workload|field"``, first 8 bytes."""
    digest = hashlib.sha256(f"{int(seed)}|{workload}|{field}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, in place on a uint64 array (wrap-around is intended)."""
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


def counter_hash(key: int, *coords) -> np.ndarray:
    """64-bit hash of (key, coords...), broadcast over array coordinates (all >= 0)."""
    arrays = np.broadcast_arrays(*[np.asarray(c, dtype=np.int64) for c in coords])
    h = np.full(arrays[0].shape, key, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in arrays:
            h += (c.astype(np.uint64) + np.uint64(1)) * _GAMMA
            _mix(h)
    return h


@attrs.frozen
class Streams:
    """Per-field counter-based uniforms for one (master seed, workload namespace).

    ``namespace`` is the workload name that enters the hash; two generators that must share a
    token schedule (``multi_turn`` and ``multi_turn_salted``) share a namespace.
    """

    seed: int
    namespace: str

    def uniform(self, field: str, group, sample=0, turn=0, lane: int = 0) -> np.ndarray:
        """Uniforms in [0, 1) for the broadcast coordinates, from ``field``'s own stream."""
        h = counter_hash(field_key(self.seed, self.namespace, field), group, sample, turn, lane)
        return (h >> _S11).astype(np.float64) * _TO_UNIT

    def normal(self, field: str, group, sample=0, turn=0) -> np.ndarray:
        """Standard normals by Box-Muller from two lanes of ``field``'s stream."""
        u1 = self.uniform(field, group, sample, turn, lane=0)
        u2 = self.uniform(field, group, sample, turn, lane=1)
        return np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * math.pi * u2)

    def correlated_uniform(self, field: str, group_z: np.ndarray, group, sample, rho: float,
                           turn=0) -> np.ndarray:
        """Uniforms whose latent normals have correlation ``rho`` within a group (Gaussian copula).

        ``group_z`` is the per-group latent normal (broadcast against ``sample``); each draw is
        ``Phi(sqrt(rho) * group_z + sqrt(1 - rho) * own_z)``, so every marginal stays U(0, 1).
        """
        own = self.normal(field, group, sample, turn)
        z = math.sqrt(rho) * np.asarray(group_z) + math.sqrt(1.0 - rho) * own
        return normal_cdf(z)


def normal_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF, via the Abramowitz-Stegun 7.1.26 erf (|error| < 1.5e-7), in [0, 1)."""
    x = np.abs(np.asarray(z, dtype=np.float64)) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-x * x)
    cdf = 0.5 * (1.0 + np.sign(z) * erf)
    return np.clip(cdf, 0.0, 1.0 - 2.0**-53)


def _as_knots(knots) -> tuple[tuple[float, float], ...]:
    try:
        out = tuple((float(p), float(x)) for p, x in knots)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"knots must be a list of [p, x] pairs, got {knots!r}") from exc
    return out


def _check_knots(inst: QuantileDist, _att, knots) -> None:
    if len(knots) < 2:
        raise ValueError(f"{inst.name}: need at least two knots [(0, x0), ..., (1, xn)], got {len(knots)}")
    if knots[0][0] != 0.0 or knots[-1][0] != 1.0:
        raise ValueError(f"{inst.name}: first knot p must be 0 and last must be 1, got "
                         f"p0={knots[0][0]}, pn={knots[-1][0]}")
    for i, (p, x) in enumerate(knots):
        if not (math.isfinite(p) and math.isfinite(x)):
            raise ValueError(f"{inst.name}: knot {i} ({p}, {x}) is not finite")
        if i and p <= knots[i - 1][0]:
            raise ValueError(f"{inst.name}: knot {i} p={p} must exceed the previous p={knots[i - 1][0]}")
        if i and x < knots[i - 1][1]:
            raise ValueError(f"{inst.name}: knot {i} x={x} is below the previous x={knots[i - 1][1]} "
                             "(x must be non-decreasing)")
    if knots[0][1] < inst.minimum:
        raise ValueError(f"{inst.name}: smallest value x0={knots[0][1]} is below the minimum {inst.minimum}")


@attrs.frozen
class QuantileDist:
    """A piecewise-linear quantile function: knots ``[(0, x0), ..., (1, xn)]``.

    ``p`` strictly increases from 0 to 1, ``x`` never decreases and ``x0 >= minimum``. Sampling
    is inverse-CDF: a uniform u maps to the linear interpolation between the knots around it,
    rounded half-to-even when ``integer`` (token counts) and left as is otherwise (seconds).
    """

    knots: tuple[tuple[float, float], ...] = attrs.field(converter=_as_knots, validator=_check_knots)
    name: str = "distribution"
    minimum: float = 1.0
    integer: bool = True

    @property
    def ps(self) -> np.ndarray:
        return np.array([p for p, _ in self.knots])

    @property
    def xs(self) -> np.ndarray:
        return np.array([x for _, x in self.knots])

    def quantile(self, u) -> np.ndarray:
        """The value at probability ``u`` (array or scalar in [0, 1])."""
        x = np.interp(np.asarray(u, dtype=np.float64), self.ps, self.xs)
        return np.rint(x).astype(np.int64) if self.integer else x

    def sample(self, u) -> np.ndarray:
        """Inverse-CDF sample from uniforms ``u`` in [0, 1) (alias of `quantile`)."""
        return self.quantile(u)

    def to_list(self) -> list[list[float]]:
        """The knots as JSON-ready ``[[p, x], ...]`` (ints where x is integral)."""
        return [[p, int(x) if self.integer and float(x).is_integer() else x] for p, x in self.knots]


def dist(name: str, knots: Sequence, minimum: float = 1.0, integer: bool = True) -> QuantileDist:
    """A `QuantileDist` whose validation errors name the knob ``name``."""
    return QuantileDist(knots, name=name, minimum=minimum, integer=integer)
