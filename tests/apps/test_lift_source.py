"""Lifting stencil programs from CUDA source: each class of kernel lifted, then the program's
float64 oracle checked against the kernel itself run on the host emulator; and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.apps.lift_regions import Lifted, NotLifted
from kernforge.apps.lift_source import lift_source
from kernforge.core import KernelSource
from kernforge.stencil.program import FaceRule, StencilProgram, apply, error_bound
from kernforge.stencil.program.expr import Const

from .lift_kernels import CASES, CONSTANTS, REFUSED, SOURCE, Case, EmulatedTarget, scalars


def _lift(entry: str, source: str = SOURCE) -> Lifted:
    r = lift_source(source, entry)
    assert isinstance(r, Lifted), r
    assert StencilProgram.from_json(r.program.to_json()) == r.program
    return r


def oracle_matches_kernel(entry: str, lifted: StencilProgram, fields: dict[str, int],
                          reductions: dict[str, int], seed: int = 0,
                          offsets: dict[str, int] | None = None,
                          tables: dict[str, int] | None = None, case: Case | None = None,
                          source: str = SOURCE) -> None:
    """Random contents in every buffer but the case's fixed ones; the kernel's outputs equal
    the oracle's within the program's error bound, and buffers the program does not write come
    back unchanged. ``offsets``: where in its buffer a field starts; ``tables``: ConstMem
    names read from buffers; ``case``: a launch of ``source``'s ``entry`` outside CASES."""
    case = case or CASES[entry]
    t = EmulatedTarget(case, source)
    rng = np.random.default_rng(seed)
    contents = {i: (np.array(case.fixed[i]) if i in case.fixed else
                    rng.uniform(-1, 1, a.size // np.dtype(str(case.params[i][1])).itemsize))
                .astype(str(case.params[i][1])) for i, a in t.prologue.items()}
    after = t.run({i: a.view(np.uint8) for i, a in contents.items()})
    got = {i: after[i].view(contents[i].dtype).astype(np.float64) for i in after}
    size = int(np.prod(case.shape))
    at = offsets or {}
    arrays = {n: contents[p][at.get(n, 0):at.get(n, 0) + size].astype(np.float64)
              .reshape(case.shape) for n, p in fields.items()}
    before = {n: float(contents[p][0]) for n, p in reductions.items()}
    consts = {**CONSTANTS, **{n: list(contents[p].astype(np.float64))
                              for n, p in (tables or {}).items()}}
    res = apply(lifted, arrays, params=scalars(case), constants=consts, reductions=before)
    bound = error_bound(lifted, arrays, params=scalars(case), constants=consts)
    for name, want in res.outputs.items():
        have = got[fields[name]][:size].reshape(case.shape)
        err = np.abs(have - want)
        assert np.all(err <= bound[name] + 1e-300), (name, err.max(), np.unravel_index(
            err.argmax(), err.shape))
    for name, value in res.reductions.items():
        assert got[reductions[name]][0] == pytest.approx(value, rel=1e-5, abs=1e-6)
    written = {fields[n] for n in res.outputs} | set(reductions.values())
    for i in set(contents) - written:
        np.testing.assert_array_equal(got[i], contents[i].astype(np.float64))


@pytest.fixture(scope="module")
def lifted() -> dict[str, Lifted]:
    return {k: _lift(k) for k in CASES}


def check_case(entry: str, r: Lifted, seed: int = 0) -> None:
    size = int(np.prod(CASES[entry].shape))
    oracle_matches_kernel(entry, r.program, dict(r.fields), dict(r.reductions), seed,
                          {n: k * size for n, k in r.components.items()}, dict(r.tables))


def test_coefficient_field_3d(lifted: dict[str, Lifted]) -> None:
    r = lifted["coef3d"]
    p = r.program
    assert (p.dims, p.precision, p.field("sigma").role, p.field("un").role) == \
        (3, "fp64", "coef", "out")
    assert p.kind(p.output("un")) == "bilinear" and p.params() == [3]
    assert [f.rule for f in p.faces] == ["keep"] * 6 and r.extents == ("nx", "ny", "nz")
    assert dict(r.fields) == {"u": 0, "un": 1, "sigma": 2}
    oracle_matches_kernel("coef3d", p, dict(r.fields), {})


def test_several_outputs(lifted: dict[str, Lifted]) -> None:
    p = lifted["pair2d"].program
    assert [o.field for o in p.outputs] == ["exn", "hzn"] and p.names("in") == ["ex", "hz"]
    oracle_matches_kernel("pair2d", p, dict(lifted["pair2d"].fields), {})


def test_residual_reduction(lifted: dict[str, Lifted]) -> None:
    r = lifted["jacobi_res"]
    (red,) = r.program.reductions
    assert (red.name, red.op, red.accumulate, red.over) == ("err", "sumsq", True, "computed")
    assert "f[0,0,0] - f_old[0,0,0]" in r.program.describe()
    oracle_matches_kernel("jacobi_res", r.program, dict(r.fields), dict(r.reductions))


def test_two_time_levels_in_place_with_constant_memory(lifted: dict[str, Lifted]) -> None:
    p = lifted["wave"].program
    assert p.field("uprev").role == "inout" and p.constants() == ["c2"]
    oracle_matches_kernel("wave", p, dict(lifted["wave"].fields), {})


def test_in_place_update(lifted: dict[str, Lifted]) -> None:
    p = lifted["inplace"].program
    assert (p.dims, p.field("u").role, p.field("v").role) == (1, "inout", "in")
    oracle_matches_kernel("inplace", p, dict(lifted["inplace"].fields), {})


def test_bilinear_periodic(lifted: dict[str, Lifted]) -> None:
    p = lifted["advect"].program
    assert p.kind(p.outputs[0]) == "bilinear" and p.periodic() == (False, False, True)
    oracle_matches_kernel("advect", p, dict(lifted["advect"].fields), {})


def test_constant_array_and_unrolled_tap_loop(lifted: dict[str, Lifted]) -> None:
    p = lifted["conv_rows"].program
    assert p.kind(p.outputs[0]) == "linear" and p.constants() == ["wc"]
    assert p.rule("x-").rule == "zeropad" and p.rule("y-").width == 0
    assert "wc[0] * in[0,0,-2]" in p.describe()
    oracle_matches_kernel("conv_rows", p, dict(lifted["conv_rows"].fields), {})


def test_loop_along_an_axis(lifted: dict[str, Lifted]) -> None:
    r = lifted["zmarch"]
    assert r.program.dims == 3 and r.extents == ("nx", "ny", "nz")
    oracle_matches_kernel("zmarch", r.program, dict(r.fields), {})


HEAT = r"""
__global__ void solve(const unsigned int n, const double alpha, const double dx,
                      const double dt, const double r, const double r2,
                      double * __restrict__ u, double * __restrict__ u_tmp) {
  int idx = blockDim.x * blockIdx.x + threadIdx.x;
  if (idx < n * n) {
    int i = idx % n;
    int j = idx / n;
    u_tmp[i+j*n] = r2 * u[i+j*n] + r * ((i < n-1) ? u[i+1+j*n] : 0.0) +
      r * ((i > 0) ? u[i-1+j*n] : 0.0) + r * ((j < n-1) ? u[i+(j+1)*n] : 0.0) +
      r * ((j > 0) ? u[i+(j-1)*n] : 0.0);
  }
}
__global__ void lapl(float *out, const float *in, const float delta, const float norm,
                     const int Lx, const int Ly) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int x = i % Lx, y = i / Lx;
  out[y*Lx + x] = norm*in[y*Lx + x] + delta*(in[y*Lx + (x + 1)%Lx] + in[y*Lx + (Lx + x - 1)%Lx]
                  + in[((y+1)%Ly)*Lx + x] + in[((Ly+y-1)%Ly)*Lx + x]);
}
template <typename T>
__global__ void copyb(const T* in, T* out, int nx, int ny) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= nx || y >= ny) return;
  int p = x + y * nx;
  if (x == 0 || y == 0 || x == nx - 1 || y == ny - 1) { out[p] = in[p]; return; }
  out[p] = 0.25f * (in[p - 1] + in[p + 1] + in[p - nx] + in[p + nx]);
}
"""


def test_flattened_index_zero_padded_and_wrapped_sources() -> None:
    heat = _lift("solve", HEAT)
    p = heat.program
    assert (p.dims, p.precision, heat.extents) == (2, "fp64", ("n", "n"))
    assert {p.rule(f).rule for f in ("y-", "y+", "x-", "x+")} == {"zeropad"}
    assert p.params() == [4, 5]
    lap = _lift("lapl", HEAT)
    assert lap.program.periodic() == (False, True, True) and lap.extents == ("Lx", "Ly")
    x = np.random.default_rng(2).uniform(-1, 1, (6, 5))
    out = apply(p, {"u": x}, params={4: 0.1, 5: 0.6}).outputs["u_tmp"]
    pad = np.pad(x, 1)
    want = 0.6 * x + 0.1 * (pad[1:-1, 2:] + pad[1:-1, :-2] + pad[2:, 1:-1] + pad[:-2, 1:-1])
    np.testing.assert_allclose(out, want, atol=1e-15)


def test_template_needs_a_precision_and_copy_faces() -> None:
    r = lift_source(KernelSource(HEAT, "copyb", "cuda"))
    assert isinstance(r, NotLifted) and "precision=" in r.reason
    ok = lift_source(HEAT, "copyb", precision="fp16")
    assert isinstance(ok, Lifted), ok
    p = ok.program
    assert p.precision == "fp16" and p.rule("x-") == p.rule("y+") == FaceRule("copy", 1)
    assert p.output("out").copy_from == "in"


@pytest.mark.parametrize(("entry", "words"), [
    ("tiled", "no halo load"),
    ("branchy", "branch on data"),
    ("radius", "loop over taps whose bounds depend"),
    ("scatter", "varying index"),
    ("rooted", "call to sqrtf"),
    ("mirrored", "does not clamp"),
    ("strided", "not the bound check of its offset"),
    ("mixed", "never computed: only copied, zeroed or kept"),
    ("below", "minus a constant along gx"),
    ("origin", "no fixed number of points"),
    ("crossed", "another axis' extent"),
    ("racy", "order of the threads"),
    ("unguarded", "outside the grid"),
])
def test_refusals_say_why(entry: str, words: str) -> None:
    r = lift_source(REFUSED, entry)
    assert isinstance(r, NotLifted) and words in r.reason, r


def test_a_kernforge_kernel_is_lifted_from_its_source() -> None:
    import kernforge

    k = kernforge.Kernel(SOURCE, "wave", backend="cpu", language="cuda")
    r = lift_source(k)
    assert isinstance(r, Lifted) and r.program.field("uprev").role == "inout"


def test_coefficient_grids_in_one_buffer_and_a_coefficient_table(
        lifted: dict[str, Lifted]) -> None:
    r = lifted["sig3"]
    p = r.program
    assert [f.name for f in p.fields] == ["u", "un", "sigma_0", "sigma_1", "sigma_2"]
    assert dict(r.components) == {"sigma_1": 1, "sigma_2": 2} and r.fields["sigma_2"] == 2
    assert {p.field(f"sigma_{k}").role for k in range(3)} == {"coef"}
    check_case("sig3", r)
    t = lifted["table1d"]
    assert dict(t.tables) == {"c": 2} and t.program.constants() == ["c"]
    assert "c[0] * in[0,0,0]" in t.program.describe()
    check_case("table1d", t)


def test_clamped_neighbours(lifted: dict[str, Lifted]) -> None:
    r = lifted["hot2d"]
    p = r.program
    assert {p.rule(f).rule for f in ("y-", "y+", "x-", "x+")} == {"clamp"}
    assert p.kind(p.outputs[0]) == "affine" and p.params() == [5, 6, 7]
    check_case("hot2d", r)
    m = lift_source("__global__ void m(const float* in, float* out, int n) {"
                    " int i = blockIdx.x * blockDim.x + threadIdx.x;"
                    " if (i < n) out[i] = in[min(i + 1, n - 1)] - in[max(i - 1, 0)]; }", "m")
    assert isinstance(m, Lifted) and m.program.rule("x+").rule == "clamp"


def test_half_precision_intrinsics(lifted: dict[str, Lifted]) -> None:
    r = lifted["half2d"]
    assert r.program.precision == "fp16" and r.program.kind(r.program.outputs[0]) == "linear"
    check_case("half2d", r)


def test_a_flat_guard_over_a_product_of_sizes() -> None:
    src = ("__global__ void scale(const float* in, float* out, int n) {"
           " int idx = blockIdx.x * blockDim.x + threadIdx.x;"
           " if (idx < n * n) out[idx] = 2.0f * in[idx]; }")
    r = lift_source(src, "scale")
    assert isinstance(r, Lifted) and r.extents == ("n*n",) and r.program.dims == 1, r
    zero = lift_source(src.replace("2.0f * in[idx]", "0.0f"), "scale")
    assert isinstance(zero, Lifted) and zero.extents == ("n*n",), zero  # heat's zero kernel
    assert zero.program.outputs[0].expr == Const(0.0) and zero.program.field("out").role == "out"


def test_missing_kernel_and_non_kernel() -> None:
    assert "no function" in lift_source(SOURCE, "nope").reason  # type: ignore[union-attr]
    src = "__device__ float f(float* a) { return a[0]; }"
    assert "not a __global__" in lift_source(src, "f").reason  # type: ignore[union-attr]
