"""The CuPy hooks on a real GPU: capture from RawKernel, RawModule and templates, true scalar
widths, in-place buffers, bitwise replay, and CuPy unchanged outside recording."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge import Kernel, Status, record, replay
from kernforge.backends import cupy_hooks, get_backend
from kernforge.backends.cupy_translate import CaptureWarning
from kernforge.core import BackendUnavailableError
from kernforge.record import find_recordings, load_recording

pytestmark = pytest.mark.gpu

SCALE = r"""
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float a,
                                 int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""
TEMPLATES = r"""
template <typename T>
__global__ void axpy(const T* __restrict__ x, T* __restrict__ y, T a, long long n)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void bump(float* u, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) u[i] = u[i] * 2.0f + 1.0f;
}
"""
WIDTHS = r"""
extern "C" __global__ void widths(unsigned long long* out, int a, long long b, float c,
                                  double d, unsigned short e, float f)
{
    out[0] = (unsigned long long)(long long)a;
    out[1] = (unsigned long long)b;
    out[2] = (unsigned long long)__float_as_uint(c);
    out[3] = (unsigned long long)__double_as_longlong(d);
    out[4] = (unsigned long long)e;
    out[5] = (unsigned long long)__float_as_uint(f);
}
"""


@pytest.fixture
def cp() -> Iterator[Any]:
    try:
        get_backend("cuda")
    except BackendUnavailableError as exc:  # pragma: no cover - only without a GPU
        pytest.skip(f"no cuda backend here: {exc}")
    import cupy
    original = (cupy.RawKernel, cupy.RawModule)
    cupy_hooks._warned.clear()
    yield cupy
    cupy_hooks.uninstall()
    assert (cupy.RawKernel, cupy.RawModule) == original


def _replay_ok(paths: list[Path]) -> None:
    for p in paths:
        m = replay(load_recording(p), warmup=1, repeat=3)
        assert m.status is Status.OK, f"{p.name}: {m.status} {m.message}"


def test_raw_kernel_capture_and_replay(cp: Any, tmp_path: Path) -> None:
    x = cp.arange(1000, dtype=cp.float32)
    y = cp.zeros(1000, dtype=cp.float32)
    with record(tmp_path) as rec:
        k = cp.RawKernel(SCALE, "scale", options=("-std=c++17", "--fmad=false"))
        k((4,), (256,), (x, y, np.float32(0.5), 1000))
    r = load_recording(rec.paths[0], verify=True)
    assert r.name == "scale-0" and r.backend == "cuda"
    assert [(a.name, a.dtype) for a in r.args] == [("x", "float32"), ("y", "float32"),
                                                   ("a", "float32"), ("n", "int32")]
    assert r.arg("n").value == 1000 and r.arg("a").value == 0.5
    assert r.options.as_dict()["fmad"] is False
    assert r.options.as_dict()["extra_options"] == "-std=c++17"
    assert r.launch.grid == (4, 1, 1) and r.launch.block == (256, 1, 1)
    np.testing.assert_array_equal(r.expected("y"), cp.asnumpy(y))
    _replay_ok(rec.paths)


def test_raw_module_templates_and_in_place_buffer(cp: Any, tmp_path: Path) -> None:
    x = cp.ones(513, dtype=cp.float64)
    y = cp.arange(513, dtype=cp.float64)
    u = cp.arange(100, dtype=cp.float32)
    with record(tmp_path) as rec:
        mod = cp.RawModule(code=TEMPLATES, name_expressions=["axpy<float>", "axpy<double>"])
        f = mod.get_function("axpy<double>")
        assert isinstance(f, cp.RawKernel) and f.num_regs > 0
        f.max_dynamic_shared_size_bytes = 1024  # forwarded to CuPy's kernel
        assert f.max_dynamic_shared_size_bytes == 1024
        f((3,), (256,), (x, y, 2.0, 513))  # y read and written
        mod.get_function("bump")((1,), (128,), (u, 100))
    units = {p.name: load_recording(p) for p in rec.paths}
    assert sorted(units) == ["axpy-0", "bump-0"]
    a = units["axpy-0"]
    assert a.options.as_dict()["name_expression"] == "axpy<double>"
    assert [p.dtype for p in a.source.signature or ()] == ["float64"] * 3 + ["int64"]
    np.testing.assert_array_equal(a.prologue("y"), np.arange(513.0))
    np.testing.assert_array_equal(a.expected("y"), np.arange(513.0) + 2.0)
    assert units["bump-0"].arg("u").written
    _replay_ok(rec.paths)


def test_scalars_are_recorded_as_the_kernel_read_them(cp: Any, tmp_path: Path) -> None:
    out = cp.zeros(6, dtype=cp.uint64)
    with record(tmp_path) as rec:
        k = cp.RawKernel(WIDTHS, "widths")
        k((1,), (1,), (out, -7, 2**40 + 5, np.float32(1.5), 2.5, np.uint16(3), 0.1))
    r = load_recording(rec.paths[0])
    seen = cp.asnumpy(out)
    vals = {a.name: (a.dtype, a.value) for a in r.args if not a.is_array}
    assert vals["a"] == ("int32", -7) and vals["b"] == ("int64", 2**40 + 5)
    assert vals["c"] == ("float32", 1.5) and vals["d"] == ("float64", 2.5)
    assert vals["e"] == ("uint16", 3) and vals["f"][0] == "float32"
    # a Python float given to a float parameter: the kernel reads the low 4 bytes of a double
    assert np.float32(vals["f"][1]).view(np.uint32) == np.uint32(seen[5])
    assert seen[0] == np.uint64(2**64 - 7) and seen[1] == 2**40 + 5
    _replay_ok(rec.paths)


def test_results_identical_with_and_without_recording(cp: Any, tmp_path: Path) -> None:
    def simulate() -> bytes:
        mod = cp.RawModule(code=TEMPLATES, name_expressions=["axpy<float>"])
        axpy, bump = mod.get_function("axpy<float>"), mod.get_function("bump")
        x = cp.linspace(0, 1, 4096, dtype=cp.float32)
        y = cp.zeros(4096, dtype=cp.float32)
        for _ in range(10):
            axpy((16,), (256,), (x, y, np.float32(0.3), 4096))
            bump((16,), (256,), (y, 4096))
        return cp.asnumpy(y).tobytes()

    plain = simulate()
    with record(tmp_path, max_instances=2) as rec:
        recorded = simulate()
    assert plain == recorded and rec.count == 4
    assert simulate() == plain  # and after recording


def test_unrecordable_launch_warns_and_runs(cp: Any, tmp_path: Path) -> None:
    plain = cp.arange(64, dtype=cp.float32)
    cp.RawModule(code=TEMPLATES).get_function("bump")((1,), (32,), (plain[::2], 32))
    u = cp.arange(64, dtype=cp.float32)
    with record(tmp_path) as rec, pytest.warns(CaptureWarning, match="not C-contiguous"):
        cp.RawModule(code=TEMPLATES).get_function("bump")((1,), (32,), (u[::2], 32))
    assert rec.paths == [] and cp.asnumpy(u).tobytes() == cp.asnumpy(plain).tobytes()


def test_uninstall_restores_cupy(cp: Any) -> None:
    original = cp.RawKernel
    assert cupy_hooks.install()
    k = cp.RawKernel(SCALE, "scale")  # made while hooked, used after
    assert cp.RawKernel is not original and isinstance(k, original)
    assert cupy_hooks.uninstall()
    assert cp.RawKernel is original and cp.RawModule is cupy_hooks.original_class(cp,
                                                                                  "RawModule")
    y = cp.zeros(4, dtype=cp.float32)
    k((1,), (4,), (cp.ones(4, dtype=cp.float32), y, np.float32(3), 4))
    assert cp.asnumpy(y).tolist() == [3.0] * 4


def test_kernforge_kernel_on_cuda_is_recorded_once(cp: Any, tmp_path: Path) -> None:
    k = Kernel(TEMPLATES, "axpy", backend="cuda", options={"name_expression": "axpy<float>"})
    x, y = cp.ones(64, dtype=cp.float32), cp.zeros(64, dtype=cp.float32)
    with record(tmp_path) as rec:
        assert cupy_hooks.installed()
        k(x, y, 2.0, 64, grid=1, block=64)
    assert [p.name for p in find_recordings(tmp_path)] == ["axpy-0"]  # not also via the hooks
    assert cp.asnumpy(y).tolist() == [2.0] * 64
    _replay_ok(rec.paths)


def test_overhead_without_observers(cp: Any) -> None:
    u = cp.zeros(32, dtype=cp.float32)
    plain = cp.RawModule(code=TEMPLATES).get_function("bump")
    cupy_hooks.install()
    hooked = cp.RawModule(code=TEMPLATES).get_function("bump")
    raw = cp.RawKernel(TEMPLATES, "bump")

    def per_call(f: Any, n: int = 4000) -> float:
        f((1,), (32,), (u, 32))
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            f((1,), (32,), (u, 32))
        cp.cuda.Device().synchronize()
        return (time.perf_counter() - t0) / n

    # interleaved passes, the order rotated each pass, the best of each: a slower stretch of
    # the host (session 10's first test process on a fresh machine: +2.65 us for the subclass
    # timed last, in three blocks of one launcher each) then hits all three alike
    fs = [plain, hooked, raw]
    best = [float("inf")] * 3
    for p in range(15):
        for i in (p % 3, (p + 1) % 3, (p + 2) % 3):
            best[i] = min(best[i], per_call(fs[i]))
    t_plain, t_proxy, t_sub = best
    print(f"\nlaunch cost: plain {t_plain * 1e6:.2f} us, RawModule proxy {t_proxy * 1e6:.2f} us, "
          f"RawKernel subclass {t_sub * 1e6:.2f} us")
    assert t_proxy - t_plain < 2e-6 and t_sub - t_plain < 2e-6
