"""The cuda backend on a real GPU (run with `pytest -m gpu` on the device machine)."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.backends import get_backend
from kernforge.core import (
    BackendUnavailableError,
    CompileError,
    CompileOptions,
    ConfigError,
    KernelSource,
    LaunchConfig,
    LaunchError,
    Variant,
)

pytestmark = pytest.mark.gpu

SAXPY = r"""
extern "C" __global__ void saxpy(const float* __restrict__ x, float* __restrict__ y,
                                 float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i] * SCALE;
}
"""
TEMPLATED = r"""
template <typename T>
__global__ void scale(const T* x, T* y, T a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
template __global__ void scale<float>(const float*, float*, float, int);
__global__ void plain_cpp(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 1.0f; }
"""


@pytest.fixture(scope="module")
def cuda():
    try:
        return get_backend("cuda")
    except BackendUnavailableError as exc:  # pragma: no cover - only without a GPU
        pytest.skip(f"no cuda backend here: {exc}")


def _variant(options=None, defines=None, block=256, n=10000, constants=None) -> Variant:
    src = KernelSource(SAXPY, "saxpy", "cuda")
    return Variant(src, CompileOptions.of(options or {}),
                   LaunchConfig(grid=((n + block - 1) // block,), block=(block,)),
                   tuple((defines or {"SCALE": "1.0f"}).items()), tuple((constants or {}).items()))


def _run(cuda, variant, n=10000, a=2.0):
    cp = cuda.cp
    rng = np.random.default_rng(1)
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    compiled = cuda.compile(variant, tolerant=bool(variant.options.get("use_fast_math")))
    cuda.launch(compiled, [dx, dy, a, n], variant.launch)
    cuda.synchronize()
    del cp
    return cuda.to_host(dy), (np.float32(a) * x + y)


def test_saxpy_correct_and_identity(cuda) -> None:
    out, ref = _run(cuda, _variant())
    np.testing.assert_array_equal(out, ref)
    ident = cuda.identity()
    assert ident["arch"].startswith("sm_") and ident["device"]


@pytest.mark.parametrize("opts", [
    {"maxrregcount": 32}, {"ftz": True}, {"prec_div": False}, {"prec_sqrt": False},
    {"fmad": False}, {"extra_device_vectorization": True}, {"dopt": "on"}, {"ptxas_opt": 1},
    {"ptxas_dlcm": "cg"}, {"ptxas_dscm": "cs"}, {"launch_bounds_max": 256},
    {"launch_bounds_max": 128, "launch_bounds_min_blocks": 4}, {"specialize_block": True},
])
def test_every_knob_compiles_and_verifies(cuda, opts) -> None:
    block = 128 if opts.get("launch_bounds_max") == 128 else 256
    out, ref = _run(cuda, _variant(opts, block=block))
    np.testing.assert_allclose(out, ref, rtol=1e-6)


def test_fast_math_needs_tolerance(cuda) -> None:
    with pytest.raises(ConfigError, match="tolerance"):
        cuda.compile(_variant({"use_fast_math": True}))
    out, ref = _run(cuda, _variant({"use_fast_math": True}))
    np.testing.assert_allclose(out, ref, rtol=1e-5)


def test_launch_bounds_refuse_bigger_block(cuda) -> None:
    v = _variant({"launch_bounds_max": 128}, block=128)
    compiled = cuda.compile(v)
    assert compiled.info["max_threads"] <= 128
    with pytest.raises(LaunchError, match="exceeds"):
        cuda.launch(compiled, [cuda.to_device(np.zeros(10, np.float32)),
                               cuda.to_device(np.zeros(10, np.float32)), 1.0, 10],
                    LaunchConfig(grid=(1,), block=(256,)))


def test_maxrregcount_changes_registers(cuda) -> None:
    heavy = KernelSource(r"""
extern "C" __global__ void heavy(const double* x, double* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
    double acc[16];
    #pragma unroll
    for (int k = 0; k < 16; k++) acc[k] = x[(i + k) % n] * (k + 1);
    double s = 0;
    #pragma unroll
    for (int k = 0; k < 16; k++) s += acc[k] * acc[15 - k];
    y[i] = s;
}""", "heavy", "cuda")
    free = cuda.compile(Variant(heavy)).info["num_regs"]
    capped = cuda.compile(Variant(heavy, CompileOptions.of(maxrregcount=32))).info["num_regs"]
    assert capped <= 32 < free or free <= 32


def test_constant_specialization_and_guard(cuda) -> None:
    v = _variant(constants={"n": 10000, "a": 2.0})
    out, ref = _run(cuda, v)
    np.testing.assert_array_equal(out, ref)
    with pytest.raises(ConfigError, match="constant"):
        _run(cuda, v, a=3.0)


def test_block_specialization_guard(cuda) -> None:
    v = _variant({"specialize_block": True}, block=256)
    compiled = cuda.compile(v)
    dx = cuda.to_device(np.zeros(512, np.float32))
    with pytest.raises(ConfigError, match="compiled for block"):
        cuda.launch(compiled, [dx, dx, 1.0, 512], LaunchConfig(grid=(4,), block=(128,)))


def test_compile_error_is_typed(cuda) -> None:
    bad = KernelSource('extern "C" __global__ void k(float* y) { y[0] = undefined_name; }', "k",
                       "cuda")
    with pytest.raises(CompileError, match="undefined_name"):
        cuda.compile(Variant(bad))


def test_cpp_names_and_templates(cuda) -> None:
    src = KernelSource(TEMPLATED, "plain_cpp", "cuda")
    compiled = cuda.compile(Variant(src))
    y = cuda.to_device(np.zeros(8, np.float32))
    cuda.launch(compiled, [y, 8], LaunchConfig(grid=(1,), block=(8,)))
    assert cuda.to_host(y).tolist() == [1.0] * 8


def test_restore_from_device_and_events(cuda) -> None:
    pristine = cuda.to_device(np.arange(1000, dtype=np.float32))
    buf = cuda.to_device(np.zeros(1000, np.float32))
    cuda.restore(buf, pristine)
    cuda.synchronize()
    assert cuda.to_host(buf).tolist() == list(range(1000))
    v = _variant()
    compiled = cuda.compile(v)
    cuda.flush_cache()
    t = cuda.time_launch(compiled, [pristine, buf, 1.0, 1000], LaunchConfig(grid=(4,), block=(256,)))
    assert 0 < t < 0.1


def test_time_launch_times_the_kernel_not_the_host(cuda) -> None:
    """With the stream held while the host enqueues, an empty kernel times in microseconds."""
    empty = KernelSource('extern "C" __global__ void nothing(int n) { }', "nothing", "cuda")
    compiled = cuda.compile(Variant(empty))
    times = sorted(cuda.time_launch(compiled, [1], LaunchConfig(grid=(1,), block=(32,)))
                   for _ in range(20))
    assert times[10] < 10e-6, times


def test_zmarch_coarsening_is_searched_and_bitwise_identical(cuda) -> None:
    """The offline zmarch rewrite of the CuPy example's stencil, realized by the tuner's
    launch.coarsen_z (KF_ZC defined, grid z divided), writes what the original writes."""
    import re
    from pathlib import Path

    from kernforge.evolve.proposers.zmarch import zmarch

    text = (Path(__file__).resolve().parents[2] / "examples" / "heat3d_cupy.py").read_text()
    code = "typedef float real_t;\n" + re.search(r'STENCIL = r"""(.*?)"""', text,
                                                 re.DOTALL)[1]
    n, block = 37, (32, 4, 2)
    launch = LaunchConfig(grid=tuple(-(-n // b) for b in block), block=block)
    plain = Variant(KernelSource(code, "heat_stencil", "cuda"), launch=launch)
    coarse = Variant(KernelSource(zmarch(code, "cuda") or "", "heat_stencil", "cuda"),
                     launch=launch)
    dims = cuda.tuning_dimensions(coarse, "quick")
    assert dims["launch.coarsen_z"][0] == 1 and 8 in dims["launch.coarsen_z"]
    assert "launch.coarsen_z" not in cuda.tuning_dimensions(plain, "quick")
    u = np.random.default_rng(3).standard_normal((n, n, n)).astype(np.float32)
    outs = []
    for v in (plain, cuda.realize(coarse, {"launch.coarsen_z": 4}),
              cuda.realize(coarse, {"launch.coarsen_z": 8, "launch.block": (64, 4, 1)})):
        du, dout = cuda.to_device(u), cuda.to_device(np.zeros_like(u))
        cuda.launch(cuda.compile(v), [du, dout, np.float32(0.1), n], v.launch)
        cuda.synchronize()
        outs.append(cuda.to_host(dout))
    assert outs[1].shape == u.shape
    for got in outs[1:]:
        np.testing.assert_array_equal(got.view(np.uint32), outs[0].view(np.uint32))
