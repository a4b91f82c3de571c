"""Where a probed kernel's grid may be and what its elements may be (:mod:`.lift_probe`):
padded grid shapes past the pointer, the element types in the order the recorded contents make
plausible, the magnitudes the recorded contents have, and the points a lifted program is
checked at."""

from __future__ import annotations

import itertools
import math

import numpy as np

from .probe import RMAX, Target


def likely_types(t: Target) -> list[str]:
    """float64 and float32, the one the recorded contents read as more plausibly first (float64
    data read as float32 gives denormals and huge values from its low words; float32 data read
    as float64 can look plausible: on a tie float32 goes first, unless every nonzero 8-byte
    element has its low 29 bits zero, as float64 values with at most float32's mantissa have
    (0.25, or any float32 value widened): read as float32 they alternate plausible numbers with
    zeros and +-2^-63/2/2^64-like values; float32 data almost never has them), then float16."""
    got = t.run({})
    words = np.concatenate([a[:a.size // 8 * 8].view("<u4") for a in got.values()])
    low, high = words[0::2], words[1::2]
    short64 = bool(np.any(high != 0)) and not np.any(low[high != 0] & 0x1FFFFFFF)

    def plausible(dt: str) -> float:
        vals = np.concatenate([a[:a.size // 8 * 8].view(dt) for a in got.values()])
        with np.errstate(all="ignore"):
            a = np.abs(vals.astype(np.float64))
        ok = (a == 0) | ((a > 1e-30) & (a < 1e30))
        return float(ok.mean()) if ok.size else 0.0
    first = ["float64", "float32"] if short64 else sorted(
        ("float32", "float64"), key=lambda d: -round(plausible(d), 2))
    return [*first, "float16"]


def magnitudes(t: Target, params: list[int], dt: np.dtype) -> dict[int, float]:
    """Per buffer parameter, the power of two nearest the largest finite magnitude the recorded
    launch left in it (1 when it holds only zeros or none is finite; within 2^-30..2^30, 2^-6..
    2^6 for float16). Probing at these magnitudes sees terms whose coefficients are tiny next to
    the values they multiply: iso2dfd's ``1e-8 * vel * lap(prev)`` with ``vel`` near 2.25e6
    vanishes below float32's resolution on inputs in [-1, 1)."""
    got = t.run({})
    lim = 6 if dt.itemsize < 4 else 30
    out = {}
    for p in params:
        a = got[p]
        with np.errstate(all="ignore"):
            v = np.abs(a[:a.size // dt.itemsize * dt.itemsize].view(dt).astype(np.float64))
        v = v[np.isfinite(v)]
        top = float(v.max()) if v.size else 0.0
        out[p] = 2.0 ** int(np.clip(round(math.log2(top)), -lim, lim)) if top > 0 else 1.0
    return out


def padded_shapes(ints: tuple[int, ...], n_out: int, cap: int
            ) -> list[tuple[tuple[int, int, int], int]]:
    """(shape, origin) of grids padded by ``r`` points around integer-parameter extents
    (fdtd3d's volume), ending where the output buffer ends and starting up to 256 elements past
    the pointer."""
    vals = sorted({v for v in ints if 2 <= v <= cap})
    out = []
    for k in (3, 2):
        for combo in itertools.product(vals, repeat=k):
            for r in range(1, RMAX + 1):
                ext = [v + 2 * r for v in combo] + [1] * (3 - k)
                shape = (ext[0], ext[1], ext[2])
                origin = n_out - math.prod(shape)
                if 0 < origin <= 256 and math.prod(shape) + origin <= cap:
                    out.append((shape, origin))
    return list(dict.fromkeys(out))[:12]


CHECK_ALL = 1 << 21  # grids up to this many points are checked at every point


def check_points(shape: tuple[int, ...], dims: int) -> tuple[np.ndarray, ...]:
    """(z, y, x) index arrays to check a program at: every point of a grid up to
    :data:`CHECK_ALL` points; else a fixed sample of 2^18 points, and 2^16 more whose every
    coordinate is, by a coin toss, within :data:`~.probe.RMAX` of one of its faces (edges and
    corners)."""
    n = math.prod(shape)
    if n <= CHECK_ALL:
        return tuple(np.indices(shape).reshape(3, -1))
    rng = np.random.default_rng(7)
    spread = np.unravel_index(rng.choice(n, min(n, 1 << 18), replace=False), shape)
    near = []
    for a, size in enumerate(shape):
        edge = np.concatenate([np.arange(min(RMAX, size)), np.arange(max(size - RMAX, 0), size)])
        coin = rng.random(1 << 16) < 0.5
        near.append(np.where(coin & (a >= 3 - dims), rng.choice(edge, 1 << 16),
                             rng.integers(0, size, 1 << 16)))
    return tuple(np.concatenate([s, e]) for s, e in zip(spread, near, strict=True))
