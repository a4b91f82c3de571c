"""Scalar conversion of ``Backend.convert_args`` (base._scalar): its fast paths (Python floats
and in-range Python ints, without a floating-point error state) give exactly what the checked
conversion gives, and refuse exactly what it refuses. The reference is the checked conversion
as it was before the fast paths (below, verbatim)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from kernforge.backends.base import FLOAT32_MAX, _scalar
from kernforge.core import ArgumentError, Param

DTYPES = ("float64", "float32", "float16", "int8", "uint8", "int16", "uint16", "int32",
          "uint32", "int64", "uint64", "bool")


def reference(p: Param, a: Any) -> Any:
    """base._scalar before the fast paths."""
    try:
        if type(a) is np.dtype(p.dtype).type:
            return a
        if isinstance(a, (str, bytes)):
            raise TypeError(f"a {type(a).__name__} is not a number")
        if p.dtype == "bool" and a not in (0, 1):
            raise ValueError("a bool parameter takes 0/1 or False/True")
        with np.errstate(over="raise"):
            value = np.dtype(p.dtype).type(a)
        if value.dtype.kind in "iu" and value != a:
            raise ValueError(f"it does not fit in {p.dtype} exactly")
        if value.dtype.kind == "f" and not np.isfinite(value) and np.isfinite(a):
            raise ValueError(f"it overflows {p.dtype}")
    except (TypeError, ValueError, OverflowError, FloatingPointError) as exc:
        raise ArgumentError(f"argument {p.name!r} ({p.ctype}) cannot take {a!r}: {exc}",
                            hint=f"pass a number that {p.dtype} represents exactly") from None
    return value


def _floats() -> list[float]:
    f32 = FLOAT32_MAX
    tiny = float(np.finfo(np.float32).tiny)
    out = [0.0, -0.0, 1.0, -1.5, 0.1, 1 / 3, 1e-50, -1e-50, tiny / 3, 5e-324, 1e300, -1e300,
           f32, -f32, math.nextafter(f32, math.inf), math.nextafter(-f32, -math.inf),
           3.4028235677973366e38, 3.5e38, 65504.0, 65520.0, math.inf, -math.inf, math.nan,
           2.0 ** 53 + 1, 2.0 ** 63, 2.0 ** 64, -2.0 ** 63, 255.0, 256.5]
    rng = np.random.default_rng(1)
    out += [float(x) for x in rng.normal(0, 1e20, 20)]
    return out


def _ints() -> list[int]:
    edges = set()
    for dt in DTYPES[3:-1]:
        info = np.iinfo(dt)
        edges |= {int(info.min) - 1, int(info.min), int(info.max), int(info.max) + 1}
    return sorted(edges | {0, 1, -1, 2, 7, 10 ** 30, -(10 ** 30)})


def _outcome(fn: Any, p: Param, a: Any) -> tuple[Any, ...]:
    try:
        v = fn(p, a)
    except ArgumentError as exc:
        return ("refused", exc.message, exc.hint)
    return ("value", type(v), np.asarray(v).tobytes())


VALUES: list[Any] = [*_floats(), *_ints(), True, False, np.float32(1.5), np.float64(-0.0),
                     np.int64(3), np.int32(-7), np.uint8(200), np.bool_(True), "1", b"2",
                     1 + 2j, None]


@pytest.mark.parametrize("dtype", DTYPES)
def test_fast_paths_give_what_the_checked_conversion_gives(dtype: str) -> None:
    p = Param("v", "T", dtype)
    for a in VALUES:
        assert _outcome(_scalar, p, a) == _outcome(reference, p, a), (dtype, a)


def test_the_fast_paths_are_taken_and_still_refuse() -> None:
    """Spot checks that do not depend on the reference: in-range values convert exactly,
    out-of-range ones are refused with the reason."""
    d, f, i = (Param("v", c, t) for t, c in
               (("float64", "double"), ("float32", "float"), ("int32", "int")))
    assert type(_scalar(d, 0.1)) is np.float64 and _scalar(d, 0.1) == 0.1
    assert type(_scalar(f, 0.1)) is np.float32 and _scalar(f, 0.1) == np.float32(0.1)
    assert np.signbit(_scalar(f, -0.0)) and math.isnan(_scalar(f, math.nan))
    assert _scalar(f, FLOAT32_MAX) == np.finfo(np.float32).max
    assert type(_scalar(i, 2 ** 31 - 1)) is np.int32 and _scalar(i, -(2 ** 31)) == -(2 ** 31)
    for p, a, why in ((f, 1e39, "overflow"), (i, 2 ** 31, "int32"),
                      (i, 1.5, "exactly"), (f, "1", "not a number")):
        with pytest.raises(ArgumentError, match=why):
            _scalar(p, a)


def test_a_floating_point_error_state_the_caller_set_is_honoured_alike() -> None:
    p = Param("v", "float", "float32")
    with np.errstate(all="raise"):
        for a, dt in itertools.product((1e-50, 0.5, 1e39), ("float32", "float16")):
            q = Param("v", "T", dt)
            assert _outcome(_scalar, q, a) == _outcome(reference, q, a), (dt, a)
        assert _outcome(_scalar, p, 1e-50) == _outcome(reference, p, 1e-50)
