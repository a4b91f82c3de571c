"""``passes`` decides as ``check_buffer`` does (same rules, in chunks, in float64 only where the
bits differ) on data made to sit on every rule's edge: NaN and infinities on either side,
signed zeros, values just inside and just outside the tolerance, integers that float64 cannot
tell apart, buffers of several chunks whose only bad element is in the last one."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from kernforge.core import Tolerance

vf = importlib.import_module("kernforge.harness.verify")  # the module, not its function

POLICIES = [Tolerance(), Tolerance("abs", atol=1e-3), Tolerance("rel", rtol=1e-4, atol=1e-6),
            Tolerance("rel", rtol=1e-4, atol=1e-6, nan="match"),
            Tolerance("abs", atol=0.5, nan="match"), Tolerance("norm", tol=1e-3)]


def _pair(rng: np.random.Generator, dtype: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A reference and an output that differs from it in a few ways at random places."""
    if np.dtype(dtype).kind in "iu":
        ref = rng.integers(0, 100, n).astype(dtype)
        out = ref.copy()
        k = rng.integers(0, n, 3)
        out[k] = out[k] + rng.integers(0, 2, 3).astype(dtype)
        return out, ref
    if dtype == "bool":
        ref = rng.integers(0, 2, n).astype(bool)
        out = ref.copy()
        out[rng.integers(0, n)] ^= rng.random() < 0.5
        return out, ref
    ref = rng.uniform(-2, 2, n).astype(dtype)
    out = ref.copy()
    k = rng.integers(0, n, 6)
    eps = float(np.finfo(np.dtype(dtype)).eps)
    out[k[0]] = ref[k[0]] * (1 + rng.choice([0.5e-4, 2e-4, 10 * eps]))  # in or out of rel
    out[k[1]] = ref[k[1]] + rng.choice([4e-4, 2e-3, 0.0])  # in or out of abs
    special = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    if rng.random() < 0.5:
        out[k[2]] = rng.choice(special)
    if rng.random() < 0.5:
        ref[k[3]] = rng.choice(special)
    if rng.random() < 0.3:  # the same NaN on both sides, or another NaN's bits
        ref[k[4]] = out[k[4]] = np.nan
        if rng.random() < 0.5:
            out.view(f"u{out.itemsize}")[k[4]] ^= 1
    if rng.random() < 0.3:
        out[k[5]], ref[k[5]] = -0.0, 0.0
    return out, ref


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "uint8",
                                   "int64", "bool"])
def test_passes_decides_as_the_full_check(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vf, "CHUNK", 7)  # several chunks per buffer
    rng = np.random.default_rng(sum(dtype.encode()))
    seen = set()
    for _ in range(300):
        out, ref = _pair(rng, dtype, int(rng.integers(1, 40)))
        for policy in POLICIES:
            want = vf.check_buffer("b", out, ref, policy).passed
            assert vf.passes(out, ref, policy) == want, (policy, out, ref)
            seen.add(want)
    assert seen == {True, False}  # both decisions were exercised


def test_integers_float64_cannot_tell_apart_differ_by_one() -> None:
    ref = np.array([2**60, 5], dtype=np.int64)
    out = ref + np.array([1, 0], dtype=np.int64)
    for policy in (Tolerance("abs", atol=0.5), Tolerance("abs", atol=1.0)):
        assert vf.passes(out, ref, policy) == vf.check_buffer("b", out, ref, policy).passed
    assert not vf.passes(out, ref, Tolerance("abs", atol=0.5))


def test_the_one_bad_element_in_the_last_chunk_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vf, "CHUNK", 1000)
    ref = np.linspace(-1, 1, 10_001, dtype=np.float32)
    out = ref * np.float32(1 + 1e-6)
    policy = Tolerance("rel", rtol=1e-5)
    assert vf.passes(out, ref, policy)
    out[-1] = 2.0
    assert not vf.passes(out, ref, policy) and not vf.check_buffer("b", out, ref, policy).passed


def test_arrays_that_cannot_be_compared_element_by_element_fail() -> None:
    a = np.zeros(4, np.float32)
    assert not vf.passes(a, np.zeros(5, np.float32))
    assert not vf.passes(a, np.zeros(4, np.float64), Tolerance("abs", atol=1.0))
