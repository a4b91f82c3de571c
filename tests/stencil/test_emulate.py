"""The CUDA host emulator: generated operators against a float64 reference, barrier semantics,
warp operations, dynamic shared memory, error reporting (needs only a host C++20 compiler)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from kernforge.core import CompileError, ConfigError, KernelRuntimeError, LaunchError
from kernforge.stencil import emulate as emu
from kernforge.stencil.kernels import naive
from kernforge.stencil.operator import Launch, Operator
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape, StencilSpec

pytestmark = pytest.mark.skipif(not (shutil.which("g++") or shutil.which("clang++")),
                                reason="no host C++ compiler")

SHAPES = (Shape(24, 20, 16), Shape(37, 21, 13))  # the second is no multiple of the block
PRECISIONS = (Precision.FP16, Precision.FP32, Precision.FP64)
CELLS = [Cell(st, sh, pr) for st in STENCILS.values() for sh in SHAPES for pr in PRECISIONS]
# the default run: every stencil once, every precision and both shapes among them; the other
# cells (one compiled module each) run with the slow tests
QUICK = {Cell(st, SHAPES[i % 2], PRECISIONS[i % 3]).id for i, st in enumerate(STENCILS.values())}


@pytest.fixture(scope="module", autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory) -> object:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNFORGE_CACHE_DIR", str(tmp_path_factory.mktemp("emulate-cache")))
        yield


@pytest.fixture(scope="module")
def naive_ops(request: pytest.FixtureRequest) -> dict[str, Operator]:
    """The naive operators of the cells this run selected (and ``CELLS[0]``), each module
    compiled in parallel, once."""
    chosen = {CELLS[0].id} | {item.callspec.params["cell"].id for item in request.session.items
                              if item.module is request.module and hasattr(item, "callspec")
                              and "cell" in item.callspec.params}
    ops = {cell.id: naive.generate(cell) for cell in CELLS if cell.id in chosen}
    emu.build(ops.values())
    return ops


def reference64(spec: StencilSpec, a: np.ndarray, coef: np.ndarray | None) -> np.ndarray:
    """Independent float64 reference: shifted sums over the offsets, boundary fixed per step."""
    r = spec.radius
    cur = a.astype(np.float64)
    nz, ny, nx = cur.shape
    inner = (slice(r, nz - r), slice(r, ny - r), slice(r, nx - r))
    for _ in range(spec.steps):
        acc = np.zeros((nz - 2 * r, ny - 2 * r, nx - 2 * r))
        for (dz, dy, dx), w in zip(spec.offsets, spec.weights, strict=True):
            if spec.kind == "varcoeff" and (dz, dy, dx) == (0, 0, 0):
                continue
            acc += w * cur[r + dz:nz - r + dz, r + dy:ny - r + dy, r + dx:nx - r + dx]
        if spec.kind == "varcoeff":
            assert coef is not None
            acc = spec.weights[0] * cur[inner] + coef.astype(np.float64)[inner] * acc
        cur = cur.copy()
        cur[inner] = acc
    return cur


@pytest.mark.parametrize("cell", [c if c.id in QUICK else pytest.param(c, marks=pytest.mark.slow)
                                  for c in CELLS], ids=lambda c: c.id)
def test_naive_operator_matches_float64_reference(cell: Cell,
                                                  naive_ops: dict[str, Operator]) -> None:
    rng = np.random.default_rng(7)
    shape = cell.shape.array_shape
    inp = rng.random(shape, dtype=np.float32).astype(cell.precision.dtype)
    coef = rng.random(shape, dtype=np.float32).astype(cell.precision.dtype) \
        if cell.stencil.kind == "varcoeff" else None
    out = inp.copy()
    arrays = {"in": inp, "out": out} | ({"coef": coef} if coef is not None else {})
    emu.emulate(naive_ops[cell.id], arrays)
    ref = reference64(cell.stencil, inp, coef)
    r = cell.radius
    inner = np.s_[r:-r, r:-r, r:-r]
    err = np.max(np.abs(out[inner].astype(np.float64) - ref[inner])) / np.max(np.abs(ref[inner]))
    assert err <= cell.precision.tolerance, err
    mask = np.ones(shape, dtype=bool)
    mask[inner] = False
    assert np.array_equal(out[mask].view(np.uint8), inp[mask].view(np.uint8))  # boundary kept
    try:  # the project's oracle, where present, agrees
        from kernforge.forge.oracle_check import check
    except ImportError:
        return
    fields = {"in": inp} | ({"coef": coef} if coef is not None else {})
    assert check(cell, fields, out).ok


# ---- hand-written kernels: one module, many entries ----------------------------------------
HAND = r"""
#include <cuda_fp16.h>
extern "C" __global__ void reverse_static(const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float s[1024];
  const unsigned T = blockDim.x * blockDim.y * blockDim.z;
  const unsigned t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const unsigned long base = (unsigned long)blockIdx.x * T;
  s[t] = in[base + t];
  __syncthreads();
  out[base + t] = s[T - 1 - t];
}
extern "C" __global__ void __launch_bounds__(256) reverse_dynamic(const double* in, double* out) {
  extern __shared__ __align__(16) double dyn[];
  const unsigned t = threadIdx.x, T = blockDim.x;
  dyn[t] = __ldg(&in[blockIdx.x * T + t]);
  __syncthreads();
  out[blockIdx.x * T + t] = dyn[T - 1 - t];
}
extern __shared__ float gsm[];
extern "C" __global__ void early_exit(const float* in, float* out) {
  const unsigned t = threadIdx.x;
  if (t >= 40) return;  // exited threads drop out of later barriers
  gsm[t] = in[t];
  __syncthreads();
  const int n = __syncthreads_count(gsm[t] > 0.5f);
  out[t] = gsm[39 - t] + 1000.0f * n;
}
extern "C" __global__ void warp_ops(const float* in, float* out) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  float v = in[t];
  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
  float x = in[t];
  for (int m = 1; m < 32; m *= 2) x = max(x, __shfl_xor_sync(0xffffffffu, x, m));
  const unsigned b = __ballot_sync(0xffffffffu, in[t] > 0.5f);
  const float up = __shfl_up_sync(0xffffffffu, in[t], 1);
  __syncwarp();
  out[4 * t + 0] = (threadIdx.x % 32 == 0) ? v : 0.0f;
  out[4 * t + 1] = x;
  out[4 * t + 2] = (float)__popc(b);
  out[4 * t + 3] = up;
}
extern "C" __global__ void atomics_vec(const float4* in, float* out) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  const float4 v = in[t];
  const float4 w = make_float4(v.w, v.z, v.y, v.x);
  atomicAdd(&out[0], w.x + w.y + w.z + w.w);
  atomicMax(reinterpret_cast<int*>(out) + 1, (int)t);
}
extern "C" __global__ void to_half(const float* in, __half* out, float* back) {
  const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
  out[t] = __float2half_rn(in[t]);
  back[t] = __half2float(out[t]);
}
extern "C" __global__ void deadlock(const float* in, float* out) {
  if (threadIdx.x == 0) __syncwarp(); else __syncthreads();
  out[threadIdx.x] = in[threadIdx.x];
}
extern "C" __global__ void trap(const float* in, float* out) {
  assert(in[threadIdx.x] >= 0.0f);
  out[threadIdx.x] = in[threadIdx.x];
}
extern "C" __global__ void partial_mask(const float* in, float* out) {
  // every lane reaches a partial mask before any lane exits: the report does not depend on
  // which host thread runs first (lanes 16-31 leaving early made an earlier form flaky)
  if (threadIdx.x < 16) __syncwarp(0xffffu); else __syncwarp(0xffff0000u);
  out[threadIdx.x] = in[threadIdx.x];
}
extern "C" __global__ void shifted_read(const float* in, float* out) { out[threadIdx.x] = in[(int)threadIdx.x - 1]; }
extern "C" __global__ void wild(const float* in, float* out) { out[threadIdx.x + 40] = in[threadIdx.x]; }
extern "C" __global__ void scribble(float* in, float* out) { in[threadIdx.x] = 0.0f; out[0] = 1.0f; }
"""
ENTRIES = ("reverse_static", "reverse_dynamic", "early_exit", "warp_ops", "atomics_vec",
           "to_half", "deadlock", "trap", "partial_mask", "shifted_read", "wild", "scribble")


@pytest.fixture(scope="module")
def hand() -> emu.Module:
    return emu.compile_source(HAND, ENTRIES)


def hand_op(entry: str, grid: int, block: tuple[int, int, int], shared: int = 0) -> Operator:
    return Operator("hand", "test", {}, HAND, (Launch(entry, (grid, 1, 1), block, ("in", "out"),
                                                      shared),))


@pytest.mark.parametrize("block", [(1024, 1, 1), (8, 4, 4), (33, 3, 1)])
def test_static_shared_memory_and_barrier_reverse_each_block(block: tuple[int, int, int]) -> None:
    threads = block[0] * block[1] * block[2]
    inp = np.arange(3 * threads, dtype=np.float32)
    out = np.zeros_like(inp)
    emu.emulate(hand_op("reverse_static", 3, block), {"in": inp, "out": out})
    assert np.array_equal(out, inp.reshape(3, threads)[:, ::-1].ravel())


def test_dynamic_shared_memory_is_sized_by_the_launch(hand: emu.Module) -> None:
    inp = np.random.default_rng(1).random(4 * 256)
    out = np.zeros_like(inp)
    hand.launch("reverse_dynamic", [inp, out], (4, 1, 1), (256, 1, 1), 256 * 8, order=None)
    assert np.array_equal(out, inp.reshape(4, 256)[:, ::-1].ravel())


def test_exited_threads_leave_the_barrier_and_namespace_scope_dynamic_shared(
        hand: emu.Module) -> None:
    inp = np.linspace(0, 1, 64, dtype=np.float32)
    out = np.zeros_like(inp)
    hand.launch("early_exit", [inp, out], (1, 1, 1), (64, 1, 1), 64 * 4)
    n = int(np.count_nonzero(inp[:40] > 0.5))
    assert np.array_equal(out[:40], inp[:40][::-1] + 1000.0 * n)
    assert not out[40:].any()


def test_warp_shuffles_votes_and_syncwarp(hand: emu.Module) -> None:
    inp = np.random.default_rng(2).random(128, dtype=np.float32)
    out = np.zeros(4 * 128, dtype=np.float32)
    hand.launch("warp_ops", [inp, out], (2, 1, 1), (64, 1, 1))
    got, warps = out.reshape(128, 4), inp.reshape(4, 32)
    assert np.allclose(got[::32, 0], warps.sum(1), rtol=1e-6)
    assert np.array_equal(got[:, 1], np.repeat(warps.max(1), 32))
    assert np.array_equal(got[:, 2], np.repeat((warps > 0.5).sum(1), 32).astype(np.float32))
    shifted = np.concatenate([warps[:, :1], warps[:, :-1]], axis=1).ravel()  # lane 0 keeps own
    assert np.array_equal(got[:, 3], shifted)


def test_atomics_and_vector_types(hand: emu.Module) -> None:
    inp = np.ones(4 * 96, dtype=np.float32)
    out = np.zeros(2, dtype=np.float32)
    hand.params("atomics_vec")
    with pytest.raises(LaunchError, match="16-byte"):
        hand.launch("atomics_vec", [inp, out], (3, 1, 1), (32, 1, 1))
    vec = inp.view([("x", "f4"), ("y", "f4"), ("z", "f4"), ("w", "f4")])
    hand.launch("atomics_vec", [vec, out], (3, 1, 1), (32, 1, 1))
    assert out[0] == 4 * 96 and out[1:].view(np.int32)[0] == 95


@pytest.mark.parametrize("defines", [None, {"KF_NO_FLOAT16": 1}], ids=["float16", "struct"])
def test_half_conversions_round_like_numpy(defines: dict[str, int] | None) -> None:
    mod = emu.compile_source(HAND, ("to_half",), defines)
    tricky = [0.0, -0.0, 1.0, 65504.0, 65519.99, 65520.0, 1e6, -1e6, 2.0 ** -24, 2.0 ** -25,
              3 * 2.0 ** -26, 2.0 ** -14, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 0.1, np.inf,
              -np.inf]
    rng = np.random.default_rng(3)
    vals = np.concatenate([tricky, rng.normal(0, 100, 200), rng.normal(0, 1e-5, 39)])
    inp = vals.astype(np.float32)
    half, back = np.zeros(inp.size, np.float16), np.zeros(inp.size, np.float32)
    mod.launch("to_half", [inp, half, back], (2, 1, 1), (128, 1, 1))
    with np.errstate(over="ignore"):
        expect = inp.astype(np.float16)
    assert np.array_equal(half.view(np.uint16), expect.view(np.uint16))
    assert np.array_equal(back, expect.astype(np.float32))


def test_deadlock_and_assert_are_reported_not_hung(hand: emu.Module) -> None:
    a, b = np.ones(64, np.float32), np.zeros(64, np.float32)
    with pytest.raises(KernelRuntimeError, match="deadlock"):
        hand.launch("deadlock", [a, b], (2, 1, 1), (64, 1, 1))
    a[17] = -1.0
    with pytest.raises(KernelRuntimeError, match=r"assertion failed.*thread \(17,0,0\)"):
        hand.launch("trap", [a, b], (2, 1, 1), (64, 1, 1))
    with pytest.raises(KernelRuntimeError, match="partial-warp"):
        hand.launch("partial_mask", [a, b], (1, 1, 1), (64, 1, 1))


def test_out_of_bounds_and_input_writes_are_caught() -> None:
    inp, out = np.ones(64, np.float32), np.zeros(64, np.float32)
    with pytest.raises(KernelRuntimeError, match=r"out: 0 bytes before, 160 after"):
        emu.emulate(hand_op("wild", 1, (64, 1, 1)), {"in": inp, "out": out})
    assert np.array_equal(out[40:], np.ones(24))  # copied back for inspection
    with pytest.raises(KernelRuntimeError, match=r"input\(s\) \['in'\]"):
        emu.emulate(hand_op("scribble", 1, (8, 1, 1)), {"in": inp, "out": out})
    assert inp.all()  # the caller's input stays as it was
    emu.emulate(hand_op("shifted_read", 1, (64, 1, 1)), {"in": inp, "out": out})
    assert np.isnan(out[0]) and np.array_equal(out[1:], inp[:63])  # the guard reads as NaN


def test_block_order_is_a_permutation_and_configurable(hand: emu.Module) -> None:
    launch = Launch("reverse_static", (5, 2, 1), (32, 1, 1), ("in", "out"))
    assert emu.block_order(launch, "forward", 0) is None
    rev, shuf = emu.block_order(launch, "reverse", 0), emu.block_order(launch, "shuffle", 4)
    assert rev is not None and list(rev) == list(range(9, -1, -1))
    assert shuf is not None and sorted(shuf) == list(range(10)) and list(shuf) != list(range(10))
    with pytest.raises(ConfigError):
        emu.block_order(launch, "diagonal", 0)
    inp, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    with pytest.raises(LaunchError, match="permutation"):
        hand.launch("reverse_static", [inp, out], (2, 1, 1), (32, 1, 1),
                    order=np.array([0, 0], np.uint64))


def test_invalid_launches_are_launch_errors(hand: emu.Module) -> None:
    a, b = np.ones(64, np.float32), np.zeros(64, np.float32)
    with pytest.raises(LaunchError, match="invalid launch"):
        hand.launch("reverse_static", [a, b], (1, 1, 1), (2048, 1, 1))
    with pytest.raises(LaunchError, match="takes 2 parameters"):
        hand.launch("reverse_static", [a], (1, 1, 1), (64, 1, 1))
    with pytest.raises(LaunchError, match="8-byte"):
        hand.launch("reverse_dynamic", [a, b], (1, 1, 1), (64, 1, 1))
    with pytest.raises(LaunchError, match="not an entry"):
        hand.launch("nope", [a, b], (1, 1, 1), (64, 1, 1))


def test_a_block_larger_than_the_launch_bounds_is_refused() -> None:
    """The emulator compiles __launch_bounds__ away; a GPU refuses such a launch."""
    src = ('extern "C" __global__ void __launch_bounds__(64, 2)\n'
           'bounded(const float* a, float* b) {\n'
           '  const int i = blockIdx.x * blockDim.x + threadIdx.x; b[i] = a[i];\n}\n')
    assert emu.launch_bounds(src) == {"bounded": 64}
    mod = emu.compile_source(src, ("bounded",))
    a, b = np.ones(128, np.float32), np.zeros(128, np.float32)
    mod.launch("bounded", [a, b], (2, 1, 1), (64, 1, 1))
    assert (b == 1).all()
    with pytest.raises(LaunchError, match=r"__launch_bounds__\(64\)"):
        mod.launch("bounded", [a, b], (1, 1, 1), (128, 1, 1))


def test_compile_error_carries_the_compiler_log() -> None:
    src = 'extern "C" __global__ void broken(float* out) {\n  out[0] = undefined_name;\n}\n'
    with pytest.raises(CompileError) as info:
        emu.compile_source(src, ("broken",))
    assert "operator.cu:2" in info.value.log and "undefined_name" in info.value.log


def test_operator_arrays_must_fit_the_cell(naive_ops: dict[str, Operator]) -> None:
    cell = CELLS[0]
    bad = np.zeros((4, 4, 4), dtype=cell.precision.dtype)
    with pytest.raises(ConfigError, match="the cell needs"):
        emu.emulate(naive_ops[cell.id], {"in": bad, "out": bad.copy()})
    with pytest.raises(ConfigError, match="no array"):
        emu.emulate(naive_ops[cell.id], {"in": bad})
