"""Correctness checks: bitwise by default, tolerances, NaN policies, measured errors."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.core import Tolerance
from kernforge.harness import check_buffer, verify


def test_identical_passes_bitwise_with_zero_error():
    a = np.linspace(0, 1, 10)
    c = check_buffer("y", a, a.copy())
    assert c.passed and c.mode == "bitwise" and c.size == 10
    assert (c.mismatches, c.max_abs, c.norm_ratio, c.first_bad) == (0, 0.0, 0.0, None)


def test_bitwise_catches_signed_zero():
    c = check_buffer("y", np.array([0.0, 1.0]), np.array([-0.0, 1.0]))
    assert not c.passed
    assert c.mismatches == 1 and c.first_bad == (0,) and c.max_abs == 0.0
    # an absolute tolerance of 0 accepts it: the values are equal
    c = check_buffer("y", np.array([0.0, 1.0]), np.array([-0.0, 1.0]), Tolerance("abs"))
    assert c.passed and c.mismatches == 1


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_bitwise_catches_one_ulp(dtype):
    ref = np.ones((3, 4), dtype=dtype)
    out = ref.copy()
    out[1, 2] = np.nextafter(out[1, 2], np.asarray(2, dtype=dtype))
    c = check_buffer("y", out, ref)
    assert not c.passed
    assert c.mismatches == 1 and c.first_bad == (1, 2)
    assert c.max_abs == pytest.approx(float(np.finfo(dtype).eps))
    assert "1/12 elements differ" in c.describe()


def test_bitwise_nan_payload_counts():
    nan1 = np.array([np.nan])
    nan2 = np.frombuffer(np.array([0x7FF8000000000001], dtype=np.uint64).tobytes(), np.float64)
    assert np.isnan(nan2[0])
    assert check_buffer("y", nan1, nan1.copy()).passed  # the same NaN reproduced
    assert not check_buffer("y", nan2.copy(), nan1).passed
    assert not check_buffer("y", nan2.copy(), nan1, Tolerance(nan="match")).passed
    # under a tolerance with nan="match", any NaN where a NaN is expected passes
    assert check_buffer("y", nan2.copy(), nan1, Tolerance("abs", atol=0.1, nan="match")).passed


def test_abs_boundary():
    ref = np.zeros(4)
    out = np.array([0.0, 1e-6, -1e-6, 0.0])
    assert check_buffer("y", out, ref, Tolerance("abs", atol=1e-6)).passed
    c = check_buffer("y", out, ref, Tolerance("abs", atol=0.9e-6))
    assert not c.passed and c.first_bad == (1,) and c.max_abs == pytest.approx(1e-6)


def test_rel_boundary_and_zero_reference():
    ref = np.array([100.0, 1.0, 0.0])
    out = np.array([100.1, 1.0, 0.0])
    assert check_buffer("y", out, ref, Tolerance("rel", rtol=1e-3 + 1e-12)).passed
    c = check_buffer("y", out, ref, Tolerance("rel", rtol=0.9e-3))
    assert not c.passed and c.max_rel == pytest.approx(1e-3)
    # a difference where the reference is 0 has infinite relative error; atol covers it
    out2 = np.array([100.0, 1.0, 1e-9])
    c = check_buffer("y", out2, ref, Tolerance("rel", rtol=0.5))
    assert not c.passed and c.max_rel == np.inf and c.first_bad == (2,)
    assert check_buffer("y", out2, ref, Tolerance("rel", rtol=0.5, atol=1e-8)).passed


def test_norm_boundary_and_zero_norm():
    ref = np.array([3.0, 4.0])  # norm 5
    out = np.array([3.0, 4.5])  # diff norm 0.5 -> ratio 0.1
    assert check_buffer("y", out, ref, Tolerance("norm", tol=0.1 + 1e-12)).passed
    c = check_buffer("y", out, ref, Tolerance("norm", tol=0.09))
    assert not c.passed and c.norm_ratio == pytest.approx(0.1)
    zero = np.zeros(3)
    assert check_buffer("y", zero.copy(), zero, Tolerance("norm", tol=0.0)).passed
    c = check_buffer("y", np.array([0.0, 1e-30, 0.0]), zero, Tolerance("norm", tol=1e6))
    assert not c.passed and c.norm_ratio == np.inf


def test_norm_does_not_overflow():
    ref = np.full(4, 1e300)
    out = ref * (1 + 1e-10)
    c = check_buffer("y", out, ref, Tolerance("norm", tol=1e-9))
    assert c.passed and c.norm_ratio == pytest.approx(1e-10, rel=1e-3)


def test_nan_policy_fail_and_match():
    ref = np.array([1.0, np.nan, 3.0])
    loose = {"mode": "abs", "atol": 1e9}
    out_nan_moved = np.array([np.nan, 2.0, 3.0])
    c = check_buffer("y", out_nan_moved, ref, Tolerance(**loose))
    assert not c.passed and c.nan_mismatches == 2 and c.first_bad == (0,)
    assert not check_buffer("y", out_nan_moved, ref, Tolerance(**loose, nan="match")).passed
    # a new NaN never passes a tolerance under nan="fail"
    out_new_nan = np.array([1.0, np.nan, np.nan])
    c = check_buffer("y", out_new_nan, ref, Tolerance(**loose, nan="match"))
    assert not c.passed and c.nan_mismatches == 1 and c.first_bad == (2,)
    # NaN where NaN is expected, with another payload: only nan="match" accepts it
    other = np.frombuffer(np.array([0x7FF8000000000002], np.uint64).tobytes(), np.float64)[0]
    out_payload = np.array([1.0, other, 3.0 + 1e-3])
    assert not check_buffer("y", out_payload, ref, Tolerance(**loose)).passed
    c = check_buffer("y", out_payload, ref, Tolerance(**loose, nan="match"))
    assert c.passed and c.nan_mismatches == 0 and c.max_abs == pytest.approx(1e-3)


def test_integer_dtypes():
    ref = np.arange(10, dtype=np.int32)
    out = ref.copy()
    out[7] += 3
    c = check_buffer("n", out, ref)
    assert not c.passed and c.mismatches == 1 and c.max_abs == 3.0 and c.first_bad == (7,)
    assert check_buffer("n", out, ref, Tolerance("abs", atol=3)).passed
    assert not check_buffer("n", out, ref, Tolerance("abs", atol=2)).passed
    big = np.array([2**62], dtype=np.int64)
    c = check_buffer("n", big + 1, big, Tolerance("abs", atol=0.5))  # float64 cannot tell
    assert not c.passed and c.max_abs >= 1.0
    u = np.array([0, 255], dtype=np.uint8)
    c = check_buffer("u", u[::-1].copy(), u, Tolerance("abs", atol=255))
    assert c.passed and c.max_abs == 255.0  # no wrap-around in the difference
    b = np.array([True, False])
    assert not check_buffer("b", ~b, b).passed


def test_complex_and_multidimensional():
    ref = np.ones((2, 2), dtype=np.complex128)
    out = ref.copy()
    out[1, 0] += 1e-3j
    c = check_buffer("z", out, ref)
    assert not c.passed and c.first_bad == (1, 0) and c.max_abs == pytest.approx(1e-3)
    assert check_buffer("z", out, ref, Tolerance("abs", atol=2e-3)).passed


def test_measured_error_reported_when_passing():
    ref = np.array([1.0, 2.0, 4.0])
    out = ref + np.array([0.0, 1e-7, -2e-7])
    c = check_buffer("y", out, ref, Tolerance("rel", rtol=1e-6))
    assert c.passed
    assert c.mismatches == 2 and c.first_bad == (1,)
    assert c.max_abs == pytest.approx(2e-7) and c.max_rel == pytest.approx(5e-8)
    assert c.norm_ratio == pytest.approx(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def test_shape_and_dtype_mismatch():
    c = check_buffer("y", np.zeros(3), np.zeros(4))
    assert not c.passed and "shape" in c.detail and "y:" in c.describe()
    c = check_buffer("y", np.zeros(3, np.float32), np.zeros(3))
    assert not c.passed and "dtype" in c.detail


def test_scalar_array():
    c = check_buffer("s", np.array(2.0), np.array(1.0))
    assert not c.passed and c.first_bad == () and c.max_abs == 1.0


def test_verify_all_buffers():
    ref = {"x": np.zeros(2), "y": np.ones(2)}
    out = {"x": np.zeros(2), "y": np.ones(2) + 1e-9}
    checks = verify(out, ref, {"y": Tolerance("abs", atol=1e-6)})
    assert [c.name for c in checks] == ["x", "y"] and all(c.passed for c in checks)
    assert checks[1].max_abs == pytest.approx(1e-9)
    checks = verify({"x": np.zeros(2), "z": np.zeros(1)}, ref, {})
    by_name = {c.name: c for c in checks}
    assert by_name["x"].passed
    assert not by_name["y"].passed and "no output" in by_name["y"].detail
    assert not by_name["z"].passed and "no expected" in by_name["z"].detail


def test_infinities_never_pass_a_tolerance_unless_identical() -> None:
    ref = np.array([np.inf, 1.0, 2.0])
    assert not check_buffer("y", np.array([-np.inf, 1.0, 2.0]), ref, Tolerance("rel", rtol=0.5)).passed
    assert not check_buffer("y", np.array([5.0, 1.0, 2.0]), ref, Tolerance("rel", rtol=0.5)).passed
    assert check_buffer("y", np.array([np.inf, 1.0, 2.0 + 1e-9]), ref, Tolerance("rel", rtol=1e-6)).passed
    # a matching infinity must not make the norm infinite and excuse errors elsewhere
    bad = check_buffer("y", np.array([np.inf, 100.0, -5.0]), ref, Tolerance("norm", tol=1e-3))
    assert not bad.passed and np.isfinite(bad.norm_ratio) and bad.norm_ratio > 1
