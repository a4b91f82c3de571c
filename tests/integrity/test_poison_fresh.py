"""Poison patterns and fresh random states."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.harness.poison import (
    fresh_array,
    fresh_state,
    is_fresh,
    poison_array,
    poison_like,
    poisoned_elements,
    same_bits,
)


@pytest.mark.parametrize(("dtype", "bits"), [
    ("float16", 0x7EA5), ("float32", 0x7FE5A5A5), ("float64", 0x7FFDA5A5A5A5A5A5),
])
def test_floats_are_poisoned_with_a_quiet_nan(dtype: str, bits: int) -> None:
    p = poison_like(np.zeros((3, 2), dtype=dtype))
    assert p.shape == (3, 2) and p.dtype == np.dtype(dtype) and np.isnan(p).all()
    size = np.dtype(dtype).itemsize
    assert (p.reshape(-1).view(f"u{size}") == bits).all()
    assert poisoned_elements(p).all()


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32", "int64", "bool"])
def test_other_dtypes_get_a5_bytes(dtype: str) -> None:
    p = poison_array((5,), dtype)
    assert (p.view(np.uint8) == 0xA5).all()
    assert poisoned_elements(p).all()


def test_complex_and_partial_poison() -> None:
    c = poison_like(np.zeros(4, np.complex128))
    assert np.isnan(c.real).all() and np.isnan(c.imag).all()
    a = poison_like(np.zeros(6))
    a[::2] = 1.0
    assert poisoned_elements(a).tolist() == [False, True] * 3
    b = np.array([1.0, -0.0, np.nan])
    assert same_bits(b, np.array([1.0, 0.0, np.nan])).tolist() == [True, False, True]


def test_fresh_floats_stay_in_the_recorded_range() -> None:
    rng = np.random.default_rng(0)
    recorded = np.linspace(-2.0, 3.0, 1000).astype(np.float32)
    fresh = fresh_array(recorded, rng)
    assert fresh.dtype == np.float32 and fresh.shape == recorded.shape
    assert fresh.min() >= -2.0 and fresh.max() <= 3.0 and not np.array_equal(fresh, recorded)


def test_fresh_rules_for_constant_integral_and_integer_data() -> None:
    rng = np.random.default_rng(1)
    zeros = fresh_array(np.zeros(100), rng)  # all-zero input: a range of width 2 around it
    assert zeros.min() >= -1.0 and zeros.max() <= 1.0 and zeros.std() > 0.1
    flags = fresh_array(np.array([0.0, 1.0, 3.0] * 50), rng)  # integral floats stay integral
    assert np.array_equal(flags, np.round(flags)) and flags.min() >= 0 and flags.max() <= 3
    idx = np.arange(10, dtype=np.int32)
    kept = fresh_array(idx, rng)
    assert np.array_equal(kept, idx) and kept is not idx  # indices are kept (a copy)
    assert fresh_array(np.array([np.nan, np.inf]), rng).max() <= 1.0  # no finite data
    assert not is_fresh(idx) and is_fresh(np.zeros(2, np.complex64))


def test_fresh_state_is_reproducible_by_seed() -> None:
    pro = {"x": np.linspace(0, 1, 50), "n": np.arange(3)}
    a, b, c = fresh_state(pro, 7), fresh_state(pro, 7), fresh_state(pro, 8)
    assert np.array_equal(a["x"], b["x"]) and not np.array_equal(a["x"], c["x"])


@pytest.mark.parametrize("values", [[1e30, 2e30], [2.0**53, 2.0**53 + 2], [-9.3e18, 9.3e18],
                                    [2.0**63, 2.0**63 + 4096], [-1.7e308, 1.7e308]])
def test_fresh_integral_floats_beyond_int64_do_not_raise(values: list[float]) -> None:
    rng = np.random.default_rng(1)
    for dtype in ("float64", "float32")[: 1 if max(map(abs, values)) > 3e38 else 2]:
        a = np.array(values * 8, dtype=dtype)
        fresh = fresh_array(a, rng)
        assert fresh.dtype == a.dtype and fresh.shape == a.shape
        assert np.all(np.isfinite(fresh))
        lo, hi = float(a.min()), float(a.max())
        width = max(hi - lo, 2.0) if np.isfinite(hi - lo) else np.inf
        assert np.all(fresh >= lo - width) and np.all(fresh <= hi + width)
