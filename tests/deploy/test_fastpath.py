"""The deployment's decision cache (deploy/fastpath.py): the same decisions as matching every
launch from scratch, on varied launches; invalidated when the spec changes or a tuned launch
fails; the helpers it relies on (overlap bits, CuPy's scalar widening) equal their references."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deploy_helpers import axpy_entry, axpy_kernel, record_axpy, refuse_tuned_axpy

from kernforge import deploy
from kernforge.backends import Kernel, events
from kernforge.backends.cupy_translate import Unrecordable, widen_scalar
from kernforge.core import LaunchConfig, Param
from kernforge.deploy import Deployment, DeploySpec
from kernforge.deploy.decide import Decider
from kernforge.deploy.match import _byte_range, overlap_bits, overlapping, overlaps


class Unhashable(int):
    """An integer argument that cannot be a cache key."""

    __hash__ = None  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def _no_deployment_left() -> Iterator[None]:
    yield
    deploy.stop()
    assert events.substituter() is None and not events.active()


def _spec(tmp_path: Path) -> DeploySpec:
    """Three entries for axpy: n=8 with a=2 compiled in (BIAS=200), n=4 (BIAS=100), and n=4
    called in place, x and y one buffer (BIAS=300)."""
    r4 = record_axpy(tmp_path / "r4", n=4)
    r8 = record_axpy(tmp_path / "r8", n=8)
    e4 = axpy_entry(r4)
    e8 = axpy_entry(r8, defines={"BIAS": 200}, constants={"a": 2.0})
    in_place = axpy_entry(r4, defines={"BIAS": 300})
    in_place = replace(in_place, problem=replace(in_place.problem, aliases=(("x", "y"),)))
    return DeploySpec((e8, e4, in_place))


def _launches(seed: int, count: int) -> list[tuple[str, str, Any, Any, dict[str, Any]]]:
    """(x kind, y kind, a, n, launch keywords): shapes, dtypes, integer and float scalars of
    several types, aliasing, launch geometry; each combination repeated (cache hits)."""
    rng = random.Random(seed)
    kinds = ["4", "4", "8", "8", "4f32", "same", "view", "16"]
    scalars_a = [2.0, 3.0, np.float64(2.0), np.float32(2.0), 2]
    geometry: list[dict[str, Any]] = [{}, {}, {"threads": 2}, {"grid": (2,)}]
    pool = []
    for _ in range(count // 3):
        xk = rng.choice(kinds)
        yk = xk if rng.random() < 0.7 else rng.choice(kinds)
        size = int(yk) if yk.isdigit() else 8 if "view" in (xk, yk) else 4
        n = rng.choice([size, size, 3, np.int64(size), np.int32(size), True, Unhashable(size)])
        pool.append((xk, yk, rng.choice(scalars_a), n, rng.choice(geometry)))
    return [rng.choice(pool) for _ in range(count)]


def _arrays(xk: str, yk: str) -> tuple[np.ndarray, np.ndarray]:
    def make(kind: str, fill: float) -> np.ndarray:
        if kind == "4f32":
            return np.full(4, fill, np.float32)
        return np.arange(float(int(kind))) + fill if kind.isdigit() else np.zeros(0)

    if xk == "same":
        y = make(yk if yk.isdigit() else "4", 1.0)
        return y, y
    if xk == "view" or yk == "view":
        buf = np.arange(16.0)
        return buf[:8], buf[4:12]
    return make(xk, 0.0), make(yk, 1.0)


def _run(dep: Deployment, launches: list[Any]) -> list[tuple[Any, ...]]:
    """Per launch: the output (or the error the original raised) and the report so far."""
    k = axpy_kernel()
    out: list[tuple[Any, ...]] = []
    with dep.start(cupy=False):
        for xk, yk, a, n, kw in launches:
            x, y = _arrays(xk, yk)
            try:
                k(x, y, a, n, **kw)
                result: Any = y.tolist()
            except Exception as exc:  # noqa: BLE001 - the original's own error, compared
                result = type(exc).__name__
            out.append((result, dep.report().to_json()["kernels"]))
    return out


@pytest.mark.parametrize("seed", [7, 11])
def test_cached_decisions_equal_uncached_on_varied_launches(tmp_path: Path, seed: int) -> None:
    spec = _spec(tmp_path)
    launches = _launches(seed, count=240)
    cached = _run(Deployment(spec), launches)
    uncached = _run(Deployment(spec, cache=False), launches)
    for i, (c, u) in enumerate(zip(cached, uncached)):
        assert c == u, f"launch {i} {launches[i]}: cached {c} != uncached {u}"
    reasons = cached[-1][1]["axpy"]["reasons"]
    assert cached[-1][1]["axpy"]["replaced"] > 0  # all three kinds of outcome were seen
    assert {"problem mismatch", "aliasing"} <= set(reasons)


def test_repeated_launches_are_decided_once(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    dep = Deployment(_spec(tmp_path))
    calls: list[int] = []
    real = Decider.decide_uncached

    def counting(self: Decider, event: Any, *rest: Any) -> Any:
        calls.append(len(event.args))
        return real(self, event, *rest)

    monkeypatch.setattr(Decider, "decide_uncached", counting)
    k = axpy_kernel()
    with dep.start(cupy=False):
        for n in (4, 4, 4, 8, 4, 8, 3, 3):
            k(np.arange(float(n)), np.ones(n), 2.0, n)
        k(np.arange(4.0), np.ones(4), 2.0, Unhashable(4))  # decided every time
        k(np.arange(4.0), np.ones(4), 2.0, Unhashable(4))
    assert len(calls) == 3 + 2
    counts = dep.report().kernels["axpy"]
    assert (counts.replaced, counts.fallback) == (8, 2)


def test_another_spec_drops_every_cached_decision(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    k = axpy_kernel()
    dep = Deployment(spec).start(cupy=False)
    y = np.ones(4)
    k(np.arange(4.0), y, 2.0, 4)
    assert y.tolist() == (2.0 * np.arange(4.0) + 101).tolist()  # BIAS=100
    dep.spec = DeploySpec((spec.entries[0],))  # the n=4 entry is gone
    y = np.ones(4)
    k(np.arange(4.0), y, 2.0, 4)
    assert y.tolist() == (2.0 * np.arange(4.0) + 1).tolist()
    dep.spec = DeploySpec((replace(spec.entries[1], variant=replace(
        spec.entries[1].variant, defines={"BIAS": "7"})),))
    y = np.ones(4)
    k(np.arange(4.0), y, 2.0, 4)
    assert y.tolist() == (2.0 * np.arange(4.0) + 8).tolist()
    deploy.use(DeploySpec(()), cupy=False)  # a new deployment: nothing is replaced
    y = np.ones(4)
    k(np.arange(4.0), y, 2.0, 4)
    assert y.tolist() == (2.0 * np.arange(4.0) + 1).tolist()
    assert dep.report().kernels["axpy"].replaced == 2


def test_a_failed_tuned_launch_is_not_retried_from_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failures = refuse_tuned_axpy(monkeypatch, "refused")
    rec = record_axpy(tmp_path / "rec")
    with deploy.use(DeploySpec((axpy_entry(rec),))):
        for _ in range(4):
            y = np.ones(4)
            axpy_kernel()(np.arange(4.0), y, 2.0, 4)
            assert y.tolist() == (2.0 * np.arange(4.0) + 1).tolist()
    assert len(failures) == 1
    assert deploy.report().kernels["axpy"].reasons == {"launch failure": 4}


def test_kernel_launch_configuration_per_call() -> None:
    k = axpy_kernel()
    compiled = k.compiled()
    a = k._configured(compiled, None, None, None, None, 2)
    assert a is k._configured(compiled, None, None, None, None, 2)
    assert a[0] == LaunchConfig(threads=2) and a[1].launch == a[0]
    assert k._configured(compiled, None, None, None, None, None)[0] == LaunchConfig()
    listed = k._configured(compiled, None, [2, 1], None, None, None)  # not remembered
    assert listed[0].grid == (2, 1, 1) and [2, 1] not in [key[1] for key in k._calls]
    with pytest.raises(TypeError):  # as without the cache
        k._configured(compiled, None, 2.0, None, None, None)


def test_overlap_bits_equal_the_byte_ranges() -> None:
    base = np.arange(64.0).reshape(8, 8)
    views = [base, base[:0], base[2:5], base[::-1], base[:, ::2], base[:, 1::2], base[3],
             base[:, 3], base.T, base[::-2, ::-3], base.reshape(-1)[10:11], np.zeros(3),
             base[5:5, :], base.reshape(-1)[8:16].view(np.int32), np.memmap]
    views = [v for v in views if isinstance(v, np.ndarray)]
    for a in views:
        for b in views:
            ra, rb = _byte_range(a), _byte_range(b)
            assert ra is not None and rb is not None
            empty = ra[0] == ra[1] or rb[0] == rb[1]
            want = not empty and ra[0] < rb[1] and rb[0] < ra[1]
            assert overlap_bits([a, b]) == [want]
    a = np.arange(16.0)
    assert overlap_bits([a[:4], a[8:], a[2:9]]) == [False, True, True]
    assert overlapping([("x", a[:4]), ("y", a[8:]), ("z", a[2:9])]) == (("x", "y", "z"),)


class DeviceLike:
    """An array of another backend: a pointer (``.data.ptr``), shape, strides, itemsize."""

    def __init__(self, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> None:
        self.data = type("Ptr", (), {"ptr": ptr})()
        self.shape, self.strides, self.itemsize = shape, strides, 4


def test_overlap_of_device_arrays_by_pointer() -> None:
    a, b = DeviceLike(1000, (4,), (4,)), DeviceLike(1016, (4,), (4,))
    assert overlap_bits([a, b]) == [False]
    assert overlap_bits([a, DeviceLike(1012, (2,), (4,))]) == [True]
    assert overlap_bits([DeviceLike(1012, (4,), (-4,)), a]) == [True]  # reaches back to 1000
    assert overlap_bits([DeviceLike(1000, (0,), (4,)), a]) == [False]


class PointerView:
    """A numpy array seen as a device array is: ``.data.ptr``, flags, shape, strides."""

    def __init__(self, a: np.ndarray) -> None:
        self.data = type("Ptr", (), {"ptr": a.ctypes.data})()
        self.flags, self.nbytes, self.itemsize = a.flags, a.nbytes, a.itemsize
        self.shape, self.strides = a.shape, a.strides


def test_byte_range_of_contiguous_device_arrays_equals_the_general_one() -> None:
    base = np.arange(64.0).reshape(8, 8)
    views = [base, base[2:5], base[3], base[:0], base.reshape(-1)[10:11], base[:, 3],
             base[::-1], base.T, base[3:4, 2:3], base[5:5, :]]
    for v in views:
        assert _byte_range(PointerView(v)) == _byte_range(v), (v.shape, v.strides)
    assert sum(v.flags.c_contiguous for v in views) >= 5  # both paths are compared


def test_overlaps_of_two_equals_overlap_bits() -> None:
    """deploy.match.overlaps (a route key's two arrays; device arrays by pointer) against
    overlap_bits, on numpy views and the same views seen as device arrays."""
    base = np.arange(64.0).reshape(8, 8)
    views = [base, base[2:5], base[3], base[:0], base.reshape(-1)[10:11], base[:, 3],
             base[::-1], base.T, base[3:4, 2:3], base[5:5, :], np.zeros(3),
             base.reshape(-1)[8:16].view(np.int32), base.reshape(-1)[15:17]]
    seen = [PointerView(v) for v in views] + [DeviceLike(1000, (4,), (4,)), object()]
    for group in (views, seen, views + seen):
        for a in group:
            for b in group:
                assert overlaps(a, b) == overlap_bits([a, b])[0]


def _widen_reference(dtype: str, value: int) -> Any:
    """What CuPy passes for a Python int (an int64), read as ``dtype``: its low bytes."""
    return np.frombuffer(np.asarray(value, np.int64).tobytes()[:np.dtype(dtype).itemsize],
                         dtype=dtype)[0]


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                   "int64", "uint64"])
def test_python_ints_widen_as_their_low_bytes(dtype: str) -> None:
    p = Param("n", dtype, dtype)
    values = [0, 1, -1, 127, 128, -129, 255, 256, 2**31 - 1, 2**31, -2**31, -2**31 - 1,
              2**32 + 5, 2**63 - 1, -2**63, 123456789012]
    for v in values:
        got = widen_scalar(p, v)
        assert type(got) is np.dtype(dtype).type and got == _widen_reference(dtype, v), v
    for v in (2**63, -2**63 - 1):
        with pytest.raises(Unrecordable, match="does not fit in an int64"):
            widen_scalar(p, v)
    assert widen_scalar(Param("b", "bool", "bool"), True) == np.bool_(True)


def test_cpu_kernel_in_place_and_distinct_calls_cached(tmp_path: Path) -> None:
    """The aliasing rule on a C kernel, with the cache: in-place and overlapping calls run
    the original however often they alternate with distinct buffers."""
    from kernforge.record import load_recording, record

    code = "void shift(const double *restrict x, double *restrict y, long n) " \
           "{ for (long i = 1; i < n; i++) y[i] = x[i - 1] + BIAS; }"
    k = Kernel("#ifndef BIAS\n#define BIAS 0\n#endif\n" + code, "shift", backend="cpu")
    with record(tmp_path / "rec") as rec:
        k(np.arange(8.0), np.zeros(8), 8)
    r = load_recording(rec.paths[0])
    entry = deploy.entry_from_recording(r, r.variant.with_(defines={"BIAS": 100}),
                                        baseline_s=2.0, tuned_s=1.0, speedup=2.0,
                                        speedup_ci=None)
    with deploy.use(DeploySpec((entry,))):
        for _ in range(3):
            a = np.arange(8.0)
            k(a, a, 8)
            x, y = np.arange(8.0), np.zeros(8)
            k(x, y, 8)
            assert y[1:].tolist() == (np.arange(7.0) + 100).tolist()
            b = np.arange(16.0)
            k(b[:8], b[4:12], 8)
    counts = deploy.report().kernels["shift"]
    assert (counts.replaced, counts.fallback) == (3, 6)
    assert counts.reasons == {"aliasing": 6}
