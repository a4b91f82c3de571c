"""Poison patterns and fresh random states for the differential integrity checks.

Poison: a bit pattern no sensible kernel computes. Floating-point elements become a quiet NaN
with a fixed payload (float16 ``0x7EA5``, float32 ``0x7FE5A5A5``, float64
``0x7FFDA5A5A5A5A5A5``; complex: both parts); every other element (integers, bool, structured
data) becomes ``0xA5`` bytes. A quiet NaN (not a signalling one) so that arithmetic on it
raises no floating-point exception and every kernel propagates it the same way.

Fresh states: new contents for the arrays of a recorded launch, of the recorded shapes and
dtypes. Floating-point arrays are drawn uniformly from the range of the recorded values
(finite ones; an all-constant array gets a range of width 2 around its value; data that is all
integral stays integral, so floats used as indices or flags keep valid values). Integer, bool
and structured arrays keep their recorded contents: they are often indices, offsets or sizes,
and random ones would make the recorded kernel itself read out of bounds.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

POISON_BYTE = 0xA5
_FLOAT_POISON = {2: 0x7EA5, 4: 0x7FE5A5A5, 8: 0x7FFDA5A5A5A5A5A5}


def poison_like(array: np.ndarray) -> np.ndarray:
    """A C-contiguous array of ``array``'s shape and dtype, every element poisoned."""
    a = np.asarray(array)
    return poison_array(a.shape, a.dtype)


def poison_array(shape: tuple[int, ...], dtype: np.dtype | str) -> np.ndarray:
    """A C-contiguous host array of ``shape`` and ``dtype``, every element poisoned."""
    out = np.empty(shape, dtype=np.dtype(dtype))
    kind, size = out.dtype.kind, out.dtype.itemsize
    if kind == "f" and size in _FLOAT_POISON:
        out.reshape(-1).view(f"u{size}")[:] = _FLOAT_POISON[size]
    elif kind == "c" and size // 2 in _FLOAT_POISON:
        out.reshape(-1).view(f"u{size // 2}")[:] = _FLOAT_POISON[size // 2]
    else:
        out.reshape(-1).view(np.uint8)[:] = POISON_BYTE
    return out


def poisoned_elements(array: np.ndarray) -> np.ndarray:
    """Boolean mask (flat): the elements of ``array`` that hold the poison bit pattern."""
    a = np.ascontiguousarray(array)
    p = poison_like(a)
    size = a.dtype.itemsize
    raw_a = a.reshape(-1).view(np.uint8).reshape(a.size, size)
    raw_p = p.reshape(-1).view(np.uint8).reshape(a.size, size)
    return np.asarray((raw_a == raw_p).all(axis=1))


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Boolean mask (flat): elements whose bit patterns are identical."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    size = a.dtype.itemsize
    return np.asarray((a.reshape(-1).view(np.uint8).reshape(a.size, size)
                       == b.reshape(-1).view(np.uint8).reshape(b.size, size)).all(axis=1))


def _range(values: np.ndarray) -> tuple[float, float]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return -1.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    if lo == hi:
        return lo - 1.0, hi + 1.0
    return lo, hi


_INT_BOUND = 2.0 ** 62  # integral values drawn as integers only well inside int64


def _draw(values: np.ndarray, rng: np.random.Generator, dtype: np.dtype) -> np.ndarray:
    lo, hi = _range(values)
    finite = values[np.isfinite(values)]
    if finite.size and -_INT_BOUND <= lo and hi < _INT_BOUND \
            and bool(np.all(finite == np.round(finite))):
        drawn = rng.integers(int(np.floor(lo)), int(np.floor(hi)) + 1, size=values.shape)
        return drawn.astype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(hi - lo):
            return rng.uniform(lo, hi, size=values.shape).astype(dtype)
        # a range wider than the largest double: draw around the midpoint in halves
        mid, half = lo / 2 + hi / 2, hi / 2 - lo / 2
        return (mid + half * rng.uniform(-1.0, 1.0, size=values.shape)).astype(dtype)


def fresh_array(prologue: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """New contents for one array (see the module docstring for the rules)."""
    a = np.asarray(prologue)
    kind = a.dtype.kind
    if kind == "f":
        return np.ascontiguousarray(_draw(a.astype(np.float64), rng, a.dtype))
    if kind == "c":
        part = np.dtype(f"f{a.dtype.itemsize // 2}")
        out = np.empty_like(a)
        out.real = _draw(a.real.astype(np.float64), rng, part)
        out.imag = _draw(a.imag.astype(np.float64), rng, part)
        return out
    return np.array(a, copy=True, order="C")


def fresh_state(prologues: Mapping[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """A fresh state for every array (``seed``: reproducible)."""
    rng = np.random.default_rng(seed)
    return {name: fresh_array(a, rng) for name, a in prologues.items()}


def is_fresh(prologue: np.ndarray) -> bool:
    """True when :func:`fresh_array` changes this array (floating-point data)."""
    return np.asarray(prologue).dtype.kind in "fc"
