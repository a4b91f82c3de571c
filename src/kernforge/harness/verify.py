"""Correctness: compare output buffers with their expected contents and measure the error.

Every check reports the *measured* error (how many elements differ, the largest absolute and
relative difference, the scale-invariant norm ratio, NaN mismatches, the first bad index) even
when it passes, so a tolerance can be chosen from data instead of guessed.

Rules, per element, under a :class:`~kernforge.core.Tolerance`:

- identical bit patterns always pass (so does a NaN that reproduces the expected NaN exactly);
- ``bitwise``: nothing else passes (``-0.0`` vs ``0.0`` and NaN payloads count);
- ``abs``: ``|out - ref| <= atol``; ``rel``: ``|out - ref| <= atol + rtol * |ref|``;
- ``norm``: ``||out - ref||_2 / ||ref||_2 <= tol`` over the elements where neither is NaN
  (``||ref|| = 0`` passes only when ``out`` equals ``ref`` there too);
- infinities pass only bit-identical, in every mode; norms are over finite elements;
- NaN, for the tolerance modes: with ``nan="fail"`` a NaN on either side that is not
  bit-identical fails; with ``nan="match"`` a NaN passes where the expected value is NaN too.

Errors are computed in float64 (complex128 for complex data). Integer data works too; two
integers that differ are at least 1 apart even where float64 cannot tell them apart.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..core import BufferCheck, Tolerance

_BITWISE = Tolerance()
_NUMERIC_KINDS = "biufc"


def _bits(flat: np.ndarray) -> np.ndarray:
    """Raw bit patterns: one unsigned int per element, or a row of bytes for odd widths."""
    size = flat.dtype.itemsize
    if size in (1, 2, 4, 8):
        return flat.view(f"u{size}")
    return flat.view(np.uint8).reshape(flat.size, size)


def _bit_equal(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    eq = _bits(out) == _bits(ref)
    return eq if eq.ndim == 1 else eq.all(axis=1)


def _values(flat: np.ndarray) -> np.ndarray:
    return flat.astype(np.complex128 if flat.dtype.kind == "c" else np.float64)


def _norm(x: np.ndarray) -> float:
    """The 2-norm, scaled so that large values do not overflow."""
    if x.size == 0:
        return 0.0
    mag = np.abs(x)
    top = float(mag.max())
    if top == 0.0 or not np.isfinite(top):
        return top
    return top * float(np.sqrt(np.sum(np.square(mag / top))))


def _ratio(num: float, den: float) -> float:
    if num == 0.0:
        return 0.0
    if den == 0.0:
        return float("inf")
    r = num / den
    return r if np.isfinite(r) else float("inf")


def _index(flat_index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat_index, shape))


def _mismatch(name: str, out: np.ndarray, ref: np.ndarray, mode: str) -> BufferCheck | None:
    """A failed check when the arrays cannot be compared element by element."""
    if out.shape != ref.shape:
        detail = f"shape {out.shape} differs from the expected {ref.shape}"
    elif out.dtype != ref.dtype:
        detail = f"dtype {out.dtype} differs from the expected {ref.dtype}"
    elif ref.dtype.kind not in _NUMERIC_KINDS + "V" or ref.dtype.itemsize == 0:
        detail = f"cannot verify arrays of dtype {ref.dtype}"
    elif ref.dtype.kind == "V" and mode != "bitwise":
        detail = f"a {mode} tolerance needs numbers; dtype {ref.dtype} can only be compared bitwise"
    else:
        return None
    return BufferCheck(name, False, mode, int(ref.size), mismatches=int(ref.size), detail=detail)


def check_buffer(name: str, out: np.ndarray, ref: np.ndarray,
                 policy: Tolerance = _BITWISE) -> BufferCheck:
    """Check ``out`` against ``ref`` under ``policy``; the measured error is always filled.

    ``mismatches`` counts elements whose bits differ; ``first_bad`` is the first element that
    fails the policy, or, on a passing check, the first element that differs at all.
    """
    out, ref = np.asarray(out), np.asarray(ref)
    bad = _mismatch(name, out, ref, policy.mode)
    if bad is not None:
        return bad
    o_flat = np.ascontiguousarray(out).reshape(-1)
    r_flat = np.ascontiguousarray(ref).reshape(-1)
    same = _bit_equal(o_flat, r_flat)
    if bool(same.all()):
        return BufferCheck(name, True, policy.mode, int(ref.size))
    differ = ~same
    if ref.dtype.kind == "V":  # structured data: bits are all there is to compare
        return BufferCheck(name, False, policy.mode, int(ref.size), mismatches=int(differ.sum()),
                           first_bad=_index(int(np.argmax(differ)), ref.shape))
    return _numeric_check(name, _values(o_flat), _values(r_flat), same, ref, policy)


def _numeric_check(name: str, o: np.ndarray, r: np.ndarray, same: np.ndarray, ref: np.ndarray,
                   policy: Tolerance) -> BufferCheck:
    differ = ~same
    o_nan, r_nan = np.isnan(o), np.isnan(r)
    comparable = ~(o_nan | r_nan)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same, 0.0, np.abs(o - r)).astype(np.float64)
    diff[~comparable] = 0.0
    diff[comparable & np.isnan(diff)] = np.inf
    if ref.dtype.kind in "iu":  # unequal integers are at least 1 apart
        diff[differ] = np.maximum(diff[differ], 1.0)
    mag = np.abs(r).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(diff == 0.0, 0.0, diff / mag)
    rel[comparable & np.isnan(rel)] = np.inf
    # Infinities are never "close": they pass only bit-identical, and norms are over finite
    # elements (an infinite reference norm would excuse any error elsewhere).
    finite = np.isfinite(o) & np.isfinite(r)
    norm_ratio = _ratio(_norm(diff[finite]), _norm(r[finite]))

    ok = same.copy()
    if policy.mode != "bitwise":
        num = finite & differ
        if policy.mode == "abs":
            ok[num] = diff[num] <= policy.atol
        elif policy.mode == "rel":
            ok[num] = diff[num] <= policy.atol + policy.rtol * mag[num]
        else:  # norm: judged as a whole below
            ok[num] = True
        if policy.nan == "match":
            ok |= o_nan & r_nan
    passed = bool(ok.all()) and (policy.mode != "norm" or norm_ratio <= policy.tol)
    failing = ~ok
    first = int(np.argmax(failing)) if bool(failing.any()) else int(np.argmax(differ))
    return BufferCheck(
        name, passed, policy.mode, int(ref.size),
        mismatches=int(differ.sum()),
        max_abs=float(diff[comparable].max(initial=0.0)),
        max_rel=float(rel[comparable].max(initial=0.0)),
        norm_ratio=norm_ratio,
        nan_mismatches=int((o_nan != r_nan).sum()),
        first_bad=_index(first, ref.shape),
    )


CHUNK = 1 << 18  # elements per step of :func:`passes`: its temporaries stay in cache


def passes(out: np.ndarray, ref: np.ndarray, policy: Tolerance = _BITWISE) -> bool:
    """``check_buffer(name, out, ref, policy).passed``, without the error figures: the same
    rules element by element, in chunks of :data:`CHUNK` and in float64 only where the bits
    differ, instead of several float64 copies of whole buffers. For a caller that needs the
    full check (its figures, its message) only when this says False. ``norm`` (judged as a
    whole), complex and structured data take the full check."""
    out, ref = np.asarray(out), np.asarray(ref)
    if policy.mode == "norm" or ref.dtype.kind in "cV" \
            or _mismatch("", out, ref, policy.mode) is not None:
        return check_buffer("", out, ref, policy).passed
    o = np.ascontiguousarray(out).reshape(-1)
    r = np.ascontiguousarray(ref).reshape(-1)
    for i in range(0, r.size, CHUNK):
        oc, rc = o[i:i + CHUNK], r[i:i + CHUNK]
        differ = np.flatnonzero(~_bit_equal(oc, rc))
        if differ.size == 0:
            continue
        if policy.mode == "bitwise":
            return False
        od, rd = _values(oc[differ]), _values(rc[differ])
        finite = np.isfinite(od) & np.isfinite(rd)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(od - rd)
        if ref.dtype.kind in "iu":  # unequal integers are at least 1 apart
            diff = np.maximum(diff, 1.0)
        bound = policy.atol if policy.mode == "abs" else \
            policy.atol + policy.rtol * np.abs(rd)
        ok = finite & (diff <= bound)
        if policy.nan == "match":
            ok |= np.isnan(od) & np.isnan(rd)
        if not bool(ok.all()):
            return False
    return True


def verify(outputs: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray],
           policies: Mapping[str, Tolerance] | None = None) -> tuple[BufferCheck, ...]:
    """One check per expected buffer (bitwise unless ``policies`` names it).

    A buffer expected but not read back, or read back but not expected, is a failed check.
    """
    policies = policies or {}
    checks = []
    for name, ref in expected.items():
        policy = policies.get(name, _BITWISE)
        if name in outputs:
            checks.append(check_buffer(name, outputs[name], ref, policy))
        else:
            checks.append(BufferCheck(name, False, policy.mode, int(np.size(ref)),
                                      detail="no output was read back for this buffer"))
    for name, out in outputs.items():
        if name not in expected:
            checks.append(BufferCheck(name, False, policies.get(name, _BITWISE).mode,
                                      int(np.size(out)),
                                      detail="no expected contents for this buffer"))
    return tuple(checks)
