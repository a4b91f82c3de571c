"""lift_source on kernels of our own writing, each modelled on a refusal class measured on
HeCBench's stencil/PDE sources (benchmarks/lift_hecbench_source.py): typedef chains, grid-stride
loops, shifts of constants, build-time defines, kernels in local headers, template kernels
given their instantiation's type; and what stays refused, with its reason."""

from __future__ import annotations

from pathlib import Path

from kernforge.apps.lift_includes import template_precision, translation_unit
from kernforge.apps.lift_regions import Lifted, NotLifted
from kernforge.apps.lift_source import lift_source

CODE = """
typedef double real8;
typedef real8 Real_t;
__global__ void advance(Real_t *__restrict__ x, const Real_t *__restrict__ v,
                        const unsigned int n, const Real_t dt) {
  int index = blockIdx.x * blockDim.x + threadIdx.x;
  int stride = blockDim.x * gridDim.x;
  for (int i = index; i < n; i += stride) {
    Real_t step = v[i] * dt;
    x[i] += step;
  }
}
__global__ void strided2(float *x, const float *y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += 2 * blockDim.x * gridDim.x)
    x[i] = y[i] * 2.0f;
}
__global__ void carried(float *x, const float *y, int n) {
  float acc = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    acc = acc + y[i];
    x[i] = acc;
  }
}
__global__ void wrapped(float *x, const float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = y[i + gridDim.x];
}
__global__ void shifted(float *out, const float *in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (HALF >> 1) && i < n - (HALF >> 1))
    out[i] = in[i - (HALF >> 1)] + in[i + (1 << 1) - 1] + 0.5f * in[i];
}
struct cell { double a, b; };
__global__ void cells(cell *c, double *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = c[i].a;
}
template <typename T>
__global__ void scaled(const T *__restrict__ in, T *__restrict__ out, int n, T a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * in[i] + in[i];
}
"""


def test_typedef_chains_and_grid_stride_loops_lift() -> None:
    r = lift_source(CODE, "advance")
    assert isinstance(r, Lifted), r
    p = r.program
    assert p.dims == 1 and p.precision == "fp64" and [o.field for o in p.outputs] == ["x"]
    assert "x = x[0,0,0] + v[0,0,0] * dt" in p.describe()


def test_other_grid_strides_stay_refused_with_the_reason() -> None:
    for entry, words in (("strided2", "grid-stride loop that is not over the thread's own"),
                         ("carried", "carries acc"), ("wrapped", "gridDim in an index")):
        r = lift_source(CODE, entry)
        assert isinstance(r, NotLifted) and words in r.reason, (entry, r)


def test_shifts_of_constants_and_build_defines_fold() -> None:
    r = lift_source(CODE, "shifted", defines=("HALF=4",))
    assert isinstance(r, Lifted), r
    assert "in[0,0,-2] + in[0,0,1] + 0.5 * in[0,0,0]" in r.program.describe()
    r = lift_source(CODE, "shifted")  # HALF undefined: the macro is named
    assert isinstance(r, NotLifted) and "'HALF'" in r.reason


def test_struct_elements_and_templates_say_which() -> None:
    r = lift_source(CODE, "cells")
    assert isinstance(r, NotLifted) and "struct or vector element" in r.reason, r
    r = lift_source(CODE, "scaled")
    assert isinstance(r, NotLifted) and "template parameter" in r.reason, r
    prec = template_precision("void scaled<float>(float const*, float*, int, float)")
    assert prec == "fp32" and template_precision("void k<4, double>(double*)") == "fp64"
    assert template_precision("heat") is None
    r = lift_source(CODE, "scaled", precision=prec)
    assert isinstance(r, Lifted) and r.program.precision == "fp32", r


def test_a_kernel_in_a_local_header_with_its_macros(tmp_path: Path) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "k.h").write_text(
        "#define IDX(i, j) ((j) * NX + (i))\n"
        "__global__ void smooth(const float *u, float *v, int nx, int ny) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  int j = blockIdx.y * blockDim.y + threadIdx.y;\n"
        "  if (i > 0 && i < nx - 1 && j > 0 && j < ny - 1)\n"
        "    v[IDX(i, j)] = 0.25f * (u[IDX(i - 1, j)] + u[IDX(i + 1, j)] + u[IDX(i, j - 1)]"
        " + u[IDX(i, j + 1)]);\n}\n")
    (tmp_path / "main.cu").write_text('#include <cuda.h>\n#include "k.h"\n#define NX nx\n'
                                      "int main() { return 0; }\n")
    assert isinstance(lift_source((tmp_path / "main.cu").read_text(), "smooth"), NotLifted)
    code = translation_unit(tmp_path / "main.cu", [tmp_path / "inc"])
    r = lift_source(code, "smooth", defines=("NX=nx",))
    assert isinstance(r, Lifted) and r.program.dims == 2, r


def test_casts_written_as_calls_chained_stores_and_constant_globals() -> None:
    code = """
typedef double Real_t; typedef long long int llint;
const Real_t mix = 0.9;
static const int OFF = 1;
#define HALF Real_t(0.5)
__global__ void m(const Real_t *__restrict__ u, Real_t *__restrict__ a, Real_t *__restrict__ b,
                  int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= OFF && i < n - OFF) a[(llint)(i)] = b[i] = HALF * mix * (u[i - OFF] + u[(llint)(i + 1)]);
}
"""
    r = lift_source(code, "m")
    assert isinstance(r, Lifted), r
    d = r.program.describe()
    assert "a = 0.5 * 0.9 * (u[0,0,-1] + u[0,0,1])" in d and "b = 0.5 * 0.9 *" in d, d
    inverse = """typedef double Real_t;
__global__ void acc(const Real_t *__restrict__ f, const Real_t *__restrict__ mass,
                    Real_t *__restrict__ a, const int n) {
  int i = blockDim.x * blockIdx.x + threadIdx.x;
  if (i >= n) return;
  Real_t inv = Real_t(1.) / mass[i];  /* lulesh's 1 / mass: no program of the model */
  a[i] = f[i] * inv;
}"""
    r = lift_source(inverse, "acc")
    assert isinstance(r, NotLifted) and r.reason == \
        "the program model refuses it: a division by a field or by zero", r
