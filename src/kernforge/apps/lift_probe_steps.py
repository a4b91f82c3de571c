"""Whether a probed kernel computes several time steps per launch (:mod:`.lift_probe`).

Rodinia's pyramid kernels (hotspot's ``calc_temp``) apply one step ``k`` times inside a launch,
each step with its own boundary (clamped reads). In the interior the composition is one
stencil of ``k`` times the reach, which the fit finds; at the faces the layers follow no rule of
that composed stencil, because every step applied the boundary again. A stencil program
describes one step per launch, so such a kernel is refused, and this module says why: the
output's weights on one field are a ``k``-fold self-convolution of a stencil of reach
``R / k`` (found by Levenberg-Marquardt least squares from a few starting points).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..stencil.program import expr as ex

TOLERANCE = 1e-4  # the fit's noise on float32 weights, relative to the largest weight
MAX_STEPS = 4


def several_steps(outs: Mapping[str, ex.Expr]) -> str | None:
    """Why the outputs look like ``k`` steps of one stencil per launch, or None."""
    for name, e in outs.items():
        weights: dict[str, dict[tuple[int, int, int], float]] = {}
        for mono, c in ex.polynomial(e).items():
            if len(mono) == 1:
                (f, off), = mono
                weights.setdefault(f, {})[off] = c
        for f, w in weights.items():
            reach = [max(abs(o[a]) for o in w) for a in range(3)]
            for k in range(MAX_STEPS, 1, -1):
                if max(reach) < k or any(r % k for r in reach):
                    continue
                s = _root(_array(w, reach), k)
                if s is not None:
                    r = max(reach) // k
                    return (f"{name} reads {f} as a stencil of reach {r} applied {k} times "
                            f"(its {len(w)} weights are that stencil's {k}-fold composition) and "
                            "its layers next to the faces follow no per-face rule: the kernel "
                            f"computes {k} time steps per launch, each with its own boundary "
                            "(a temporal kernel, as Rodinia's pyramid hotspot); a stencil "
                            "program describes one step per launch")
    return None


def _array(w: Mapping[tuple[int, int, int], float], reach: list[int]) -> np.ndarray:
    a = np.zeros(tuple(2 * r + 1 for r in reach))
    for off, c in w.items():
        a[tuple(o + r for o, r in zip(off, reach, strict=True))] = c
    return a


def _conv(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros(tuple(x + y - 1 for x, y in zip(a.shape, b.shape, strict=True)))
    for idx in zip(*np.nonzero(b), strict=True):
        out[tuple(slice(i, i + n) for i, n in zip(idx, a.shape, strict=True))] += a * b[idx]
    return out


def _power(s: np.ndarray, k: int) -> np.ndarray:
    out = s
    for _ in range(k - 1):
        out = _conv(out, s)
    return out


def _root(w: np.ndarray, k: int) -> np.ndarray | None:
    """A stencil ``s`` (of the shape ``(n - 1) / k + 1`` per axis) with ``s^k == w`` within
    :data:`TOLERANCE`, having weights off its centre; None when none is found."""
    top = float(np.abs(w).max())
    if top == 0:
        return None
    target = w / top
    shape = tuple((n - 1) // k + 1 for n in w.shape)
    centre = tuple(n // 2 for n in shape)
    units = np.eye(int(np.prod(shape))).reshape(-1, *shape)
    rng = np.random.default_rng(0)
    total = float(target.sum())
    start = abs(total) ** (1 / k) * (np.sign(total) if k % 2 else 1.0)
    for attempt in range(8):
        s = np.zeros(shape)
        s[centre] = start or 1.0
        if attempt:
            s += rng.normal(0, 0.5, shape)
        got = _solve(s, target, k, units)
        if got is None:
            continue
        off = got.copy()
        off[centre] = 0
        if np.abs(off).max() > 1e-3 * np.abs(got).max():
            return got * top ** (1 / k)
    return None


def _solve(s: np.ndarray, target: np.ndarray, k: int, units: np.ndarray) -> np.ndarray | None:
    lam = 1e-3
    f = (_power(s, k) - target).ravel()
    for _ in range(200):
        if np.abs(f).max() <= TOLERANCE:
            return s
        q = _power(s, k - 1) if k > 1 else np.ones((1,) * s.ndim)
        J = np.stack([k * _conv(q, u).ravel() for u in units], axis=1)
        g = J.T @ f
        H = J.T @ J
        step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-12), -g)
        trial = s + step.reshape(s.shape)
        ft = (_power(trial, k) - target).ravel()
        if ft @ ft < f @ f:
            s, f, lam = trial, ft, lam / 3
        else:
            lam *= 4
            if lam > 1e8:
                break
    return s if np.abs(f).max() <= TOLERANCE else None
