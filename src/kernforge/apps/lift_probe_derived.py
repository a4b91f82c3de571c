"""What probing derives from the kernel's responses rather than from its parameters
(:mod:`.lift_probe`): the grid's extents when no integer parameters give them (extents that are
compile-time constants, as rtm8's ``nx``, ``ny``, ``nz`` macros: the strides of the footprint
tell them), and an output that is the product of two other outputs' new values (rtm8's
``image = next_s * next_r``: a polynomial of degree 4 in the inputs, past what the fit tries),
the small terms a fit must keep (hotspot3D's power at 2^-9 beside temperatures at 2^8: below
1000 ulps of the largest term, yet 20 times what the fit leaves unexplained without it),
and the short decimals a fit's coefficients stand for (lulesh's ``0.01``, fitted as
``0.00999999999999997``: least squares on rounded outputs leaves float64 coefficients hundreds
of ulps off, more than the program's error bound allows).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ..stencil.program import expr as ex
from .probe import RMAX, _decompose

if TYPE_CHECKING:
    from .lift_probe import _Lifter

MAX_HITS = 4096  # responses to one impulse beyond which the kernel is not local
MIN_POINTS = 16  # computed points an output must have for a product to be told
NOISE = 8  # a term this many times the fit's worst residual (or rounding) is real
SNAP = 1024  # ulps a fitted coefficient may be from the decimal it stands for
SPOTS = (0.5, 0.382, 0.618, 0.447, 0.553, 0.309, 0.691)  # where impulses go, in turn


def footprint_shapes(lf: _Lifter, n: int) -> list[tuple[int, int, int]]:
    """(nx, ny, nz) grids of ``n`` points whose strides explain where the outputs respond to
    one impulse per input, the buffers read as a line: the nearest responses past
    :data:`~.probe.RMAX` are one row (``nx``), then one plane away. The impulse goes at a few
    points spread over the line until one lies inside the computed region."""
    lf.origin, lf.n, lf.shape = 0, n, (n, 1, 1)
    lf.fields = {f"p{b.param}": (b.param, 0) for b in lf.grids}
    base = lf.random()
    y0, _ = lf.run(base)
    for frac in SPOTS:
        centre = int(frac * n)
        offs: set[int] = set()
        for b in lf.grids:
            x = {**base, b.param: base[b.param].copy()}  # one copy: grids may be large
            x[b.param][centre] += 0.5 * lf.scale[b.param]
            y, _ = lf.run(x)
            for o in lf.outs:
                d = y[o] - y0[o]
                hit = np.flatnonzero((d != 0) | np.isnan(d))
                if hit.size > MAX_HITS:
                    return []
                offs |= {int(q) - centre for q in hit}
        found = strides(offs, n)
        if found:
            return found
    return []


def strides(offs: set[int], n: int) -> list[tuple[int, int, int]]:
    """The grids of ``n`` points on which every flat offset of ``offs`` is a tap within
    :data:`~.probe.RMAX` per axis, those on which the taps lie closest first."""
    far = sorted(abs(d) for d in offs if abs(d) > RMAX)
    if not far:
        return []
    out: list[tuple[int, int, int]] = []
    for nx in range(max(2 * RMAX + 2, far[0] - RMAX), far[0] + RMAX + 1):
        if n % nx:
            continue
        rest = [d for d in offs if _decompose(d, nx, n // nx, 1) is None]
        if not rest:
            out.append((nx, n // nx, 1))
            continue
        m = min(abs(d) for d in rest)
        for dy, dx in itertools.product(range(-RMAX, RMAX + 1), repeat=2):
            plane = m - dy * nx - dx
            if plane <= nx or plane % nx or n % plane:
                continue
            shape = (nx, plane // nx, n // plane)
            if shape not in out and all(_decompose(d, *shape) is not None for d in offs):
                out.append(shape)

    def spread(shape: tuple[int, int, int]) -> int:
        """How far the footprint reaches on ``shape``: the true grid's taps are the closest."""
        return sum(sum(map(abs, _decompose(d, *shape) or (RMAX,) * 3)) for d in offs)
    return sorted(out, key=spread)[:4]


def products(lf: _Lifter, outs: list[str], base: Mapping[int, np.ndarray],
             y0: Mapping[int, np.ndarray]) -> dict[str, tuple[str, str]]:
    """Outputs whose every computed point (a point whose value the launch changed) holds the
    product, rounded to the element type, of two other outputs' new values there."""
    found: dict[str, tuple[str, str]] = {}
    used: set[str] = set()  # factors: fitted, never products themselves
    for o in outs:
        if o in used:
            continue
        got, old = lf.grid(y0, o), lf.grid(base, o)
        done = got != old
        if int(done.sum()) < MIN_POINTS:
            continue
        others = [a for a in outs if a != o and a not in found]
        for a, b in itertools.combinations_with_replacement(others, 2):
            want = (lf.grid(y0, a)[done] * lf.grid(y0, b)[done]).astype(lf.dt)
            if np.array_equal(got[done], want.astype(np.float64)):
                found[o] = (a, b)
                used |= {a, b}
                break
    return found


def product(exprs: Mapping[str, ex.Expr], pair: tuple[str, str]) -> ex.Expr:
    """The product of two outputs' expressions (both read the fields before the launch)."""
    return ex.Bin("*", exprs[pair[0]], exprs[pair[1]])


def snapped(coef: np.ndarray, A: np.ndarray, b: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``coef`` with each coefficient replaced by the shortest decimal within
    :data:`SNAP` ulps of it (of its own type), when the rows ``A`` then fit ``b`` no worse at
    any run's worst point; else ``coef`` unchanged."""
    eps = float(np.finfo(dt).eps)
    out = coef.copy()
    for i, c in enumerate(coef):
        for digits in range(1, 18):
            d = float(np.asarray(float(f"{c:.{digits}g}")).astype(dt))
            if abs(d - c) <= SNAP * eps * abs(c):
                out[i] = d
                break
    if np.array_equal(out, coef):
        return coef
    better = np.abs(A @ out - b).max() <= np.abs(A @ coef - b).max()
    return out if better else coef


def real_terms(A: np.ndarray, b: np.ndarray, full: np.ndarray, top: np.ndarray, eps: float
               ) -> np.ndarray:
    """Which terms of the least-squares fit ``full`` of ``A`` to ``b`` are real: a term is
    negligible by its size at the probed magnitudes (its coefficient times its largest value
    ``top``), not by its coefficient alone; it stays when that size is at least
    ``min(1e3 eps, 0.02)`` of the largest term's, or :data:`NOISE` times the fit's worst
    residual (at least the outputs' rounding)."""
    size = np.abs(full) * top
    noise = max(float(np.abs(A @ full - b).max()), eps * float(np.abs(b).max()))
    return (size > min(1e3 * eps, 2e-2) * max(float(size.max()), 1e-300)) | \
        (size > NOISE * noise)


def lstsq(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares on columns scaled to one magnitude (monomials of fields of magnitudes
    2^21 and 1 differ by 2^42: unscaled, the small ones fall under the solver's cut-off)."""
    s = np.abs(A).max(axis=0)
    s[s == 0] = 1.0
    return np.linalg.lstsq(A / s, b, rcond=None)[0] / s


def refit(coef: np.ndarray, keep: np.ndarray, rec: tuple[np.ndarray, np.ndarray],
          unit: tuple[np.ndarray, np.ndarray], k: float, dt: np.dtype) -> np.ndarray:
    """The kept terms' coefficients fitted on the rows of runs at the recorded magnitudes
    (``rec``) and in [-1, 1) (``unit``) together, each run's rows weighted by its outputs'
    size: a term small at the recorded magnitudes (hotspot3D's power) is measured where it is
    large. Taken when both sets still fit within ``k`` times their magnitudes; else ``coef``."""
    (A, b), (U, c) = rec, unit
    wa, wu = 1 / max(float(np.abs(b).max()), 1e-300), 1 / max(float(np.abs(c).max()), 1e-300)
    new = np.zeros_like(coef)
    new[keep] = lstsq(np.concatenate([A[:, keep] * wa, U[:, keep] * wu]),
                      np.concatenate([b * wa, c * wu]))
    new = snapped(new.astype(dt).astype(np.float64), A, b, dt)
    fits = all(np.all(np.abs(M @ new - r) <= k * (np.abs(M) @ np.abs(new) + np.abs(r)) + 1e-300)
               for M, r in ((A, b), (U, c)))
    return new if fits else coef
