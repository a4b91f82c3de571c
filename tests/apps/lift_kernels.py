"""CUDA test kernels of the classes stencil programs describe, run on the host emulator: the
sources lifting reads, and a probe target (:mod:`kernforge.apps.probe`) that launches them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from kernforge.apps.probe import ProbeBuffer
from kernforge.stencil import emulate

SOURCE = r"""
#include <cuda_fp16.h>
#define R 2
__constant__ float wc[2 * R + 1] = {0.1f, 0.2f, 0.4f, 0.2f, 0.1f};
__constant__ double c2 = 0.15;

// a coefficient field (stencil3d's sigma): interior only, the boundary kept
extern "C" __global__ void coef3d(const double* __restrict__ u, double* __restrict__ un,
                                  const double* __restrict__ sigma, double dt,
                                  int nx, int ny, int nz) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  int k = blockIdx.z * blockDim.z + threadIdx.z;
  if (i < 1 || j < 1 || k < 1 || i > nx - 2 || j > ny - 2 || k > nz - 2) return;
  int p = i + nx * (j + ny * k);
  double lap = u[p - 1] + u[p + 1] + u[p - nx] + u[p + nx] + u[p - nx * ny] + u[p + nx * ny]
               - 6.0 * u[p];
  un[p] = u[p] + dt * sigma[p] * lap;
}

// two fields updated together (a staggered 2D wave/FDTD pair), each from both
extern "C" __global__ void pair2d(const float* ex, const float* hz, float* exn, float* hzn,
                                  float ca, float cb, int nx, int ny) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= 1 && x < nx - 1 && y >= 1 && y < ny - 1) {
    int p = y * nx + x;
    exn[p] = ex[p] + ca * (hz[p] - hz[p - nx]);
    hzn[p] = hz[p] - cb * (ex[p + 1] - ex[p]);
  }
}

// Jacobi with its residual summed beside the grid
extern "C" __global__ void jacobi_res(const float* f_old, float* f, float* err, int n) {
  int i = threadIdx.x + blockIdx.x * blockDim.x;
  int j = threadIdx.y + blockIdx.y * blockDim.y;
  if (j >= 1 && j <= n - 2 && i >= 1 && i <= n - 2) {
    f[j * n + i] = 0.25f * (f_old[j * n + i + 1] + f_old[j * n + i - 1] +
                            f_old[(j + 1) * n + i] + f_old[(j - 1) * n + i]);
    float df = f[j * n + i] - f_old[j * n + i];
    atomicAdd(err, df * df);
  }
}

// two time levels, the new level written over the oldest one; c2 in __constant__ memory
extern "C" __global__ void wave(const double* u, double* uprev, int nx, int ny) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x > 0 && y > 0 && x < nx - 1 && y < ny - 1) {
    int p = x + y * nx;
    uprev[p] = 2.0 * u[p] - uprev[p] + c2 * (u[p + 1] + u[p - 1] + u[p + nx] + u[p - nx]
                                            - 4.0 * u[p]);
  }
}

// in place: the field updated from a neighbour-reading term of another
extern "C" __global__ void inplace(float* u, const float* v, float dt, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 1 && i < n - 1) u[i] += dt * (v[i + 1] - v[i - 1]);
}

// a bilinear (advection) term, periodic in x
extern "C" __global__ void advect(const float* u, float* w, float cfl, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float up = u[(i + 1) % n], um = u[(n + i - 1) % n];
    w[i] = u[i] - cfl * u[i] * (up - um);
  }
}

// __constant__ weights, a loop over the taps with constant bounds, zero outside the grid
extern "C" __global__ void conv_rows(const float* in, float* out, int nx, int ny) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= nx || y >= ny) return;
  float s = 0.0f;
  for (int k = -R; k <= R; k++) {
    float v = 0.0f;
    if (x + k >= 0 && x + k < nx) v = in[y * nx + x + k];
    s += wc[k + R] * v;
  }
  out[y * nx + x] = s;
}

// hotspot-like: a source field, an ambient term, neighbours clamped at the edges
extern "C" __global__ void hot2d(const float* power, const float* src, float* dst,
                                 int cols, int rows, float cap, float rx, float ry) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (c >= cols || r >= rows) return;
  int n = r > 0 ? r - 1 : 0, s = r < rows - 1 ? r + 1 : r;
  int w = c > 0 ? c - 1 : 0, e = c < cols - 1 ? c + 1 : c;
  float t = src[r * cols + c];
  dst[r * cols + c] = t + cap * (power[r * cols + c]
      + (src[s * cols + c] + src[n * cols + c] - 2.0f * t) * ry
      + (src[r * cols + e] + src[r * cols + w] - 2.0f * t) * rx + (80.0f - t) * 0.25f);
}

// stencil3d-like: one buffer holds a coefficient grid per direction, one after another
extern "C" __global__ void sig3(const double* u, double* un, const double* sigma,
                                int nx, int ny, int nz) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  int k = blockIdx.z * blockDim.z + threadIdx.z;
  if (i < 1 || j < 1 || k < 1 || i > nx - 2 || j > ny - 2 || k > nz - 2) return;
  int p = i + nx * (j + ny * k), n = nx * ny * nz;
  un[p] = u[p] + sigma[p] * (u[p + 1] - 2.0 * u[p] + u[p - 1])
               + sigma[p + n] * (u[p + nx] - 2.0 * u[p] + u[p - nx])
               + sigma[p + 2 * n] * (u[p + nx * ny] - 2.0 * u[p] + u[p - nx * ny]);
}

// fdtd3d-like: the weights in a small read-only buffer
extern "C" __global__ void table1d(const float* in, float* out, const float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 2 && i < n - 2)
    out[i] = c[0] * in[i] + c[1] * (in[i - 1] + in[i + 1]) + c[2] * (in[i - 2] + in[i + 2]);
}

// half precision through the fp16 intrinsics
extern "C" __global__ void half2d(const __half* in, __half* out, int nx, int ny) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < 1 || y < 1 || x >= nx - 1 || y >= ny - 1) return;
  int p = y * nx + x;
  out[p] = __hadd(__hmul(__float2half(0.5f), in[p]),
                  __hmul(__float2half(0.125f), __hadd(__hadd(in[p - 1], in[p + 1]),
                                                      __hadd(in[p - nx], in[p + nx]))));
}

// a z-marching kernel: a 2D thread grid walks z in a loop
extern "C" __global__ void zmarch(const float* in, float* out, int nx, int ny, int nz) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i < 1 || j < 1 || i >= nx - 1 || j >= ny - 1) return;
  for (int k = 1; k < nz - 1; k++) {
    int p = (k * ny + j) * nx + i;
    out[p] = 0.5f * in[p] + 0.125f * (in[p - 1] + in[p + 1] + in[p - nx] + in[p + nx])
             + 0.0625f * (in[p - nx * ny] + in[p + nx * ny]);
  }
}

// burger's core: the thread's point is one up and one right of its indices (the interior);
// two outputs with advection terms (products of fields)
extern "C" __global__ void burgers(double* __restrict__ un, double* __restrict__ vn,
                                   const double* __restrict__ u, const double* __restrict__ v,
                                   int nx, int ny, double nu, double dt) {
  int i = blockIdx.y * blockDim.y + threadIdx.y + 1;
  int j = blockIdx.x * blockDim.x + threadIdx.x + 1;
  if (j < nx - 1 && i < ny - 1) {
    int p = i * nx + j;
    un[p] = u[p] + nu * (u[p + 1] + u[p - 1] + u[p + nx] + u[p - nx] - 4.0 * u[p])
            - dt * u[p] * (u[p] - u[p - 1]) - dt * v[p] * (u[p] - u[p - nx]);
    vn[p] = v[p] + nu * (v[p + 1] + v[p - 1] + v[p + nx] + v[p - nx] - 4.0 * v[p])
            - dt * u[p] * (v[p] - v[p - 1]) - dt * v[p] * (v[p] - v[p - nx]);
  }
}

// hypterm's indices: max(blockIdx * blockDim, 0) + threadIdx, a guard joined by bitwise &
#define KF_MAX(a, b) ((a) > (b) ? (a) : (b))
extern "C" __global__ void hyper(float* f0, float* f1, const float* c, const float* q,
                                 float dxinv, int nx, int ny, int nz) {
  int i0 = (int)(blockIdx.x) * (int)(blockDim.x);
  int i = KF_MAX(i0, 0) + (int)(threadIdx.x);
  int j = max((int)(blockIdx.y * blockDim.y), 0) + (int)(threadIdx.y);
  int k = KF_MAX(0, (int)(blockIdx.z) * (int)(blockDim.z)) + (int)(threadIdx.z);
  if (i >= 2 & j >= 0 & k >= 0 & i <= nx - 3 & j < ny & k < nz) {
    int p = (k * ny + j) * nx + i;
    f0[p] = -(0.8f * (c[p + 1] - c[p - 1]) - 0.2f * (c[p + 2] - c[p - 2])) * dxinv;
    f1[p] = -(0.8f * (c[p + 1] * q[p + 1] - c[p - 1] * q[p - 1])
              - 0.2f * (c[p + 2] * q[p + 2] - c[p - 2] * q[p - 2])) * dxinv;
  }
}

// reaction's Gray-Scott terms: cubic monomials, two outputs, a grid-stride loop
extern "C" __global__ void gray(const float* fx, const float* fy, float* drx, float* dry,
                                int n, float c1, float c2) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    float r = fx[i] * fy[i] * fy[i];
    drx[i] = -r + c1 * (1.0f - fx[i]);
    dry[i] = r - (c1 + c2) * fy[i];
  }
}

// burger's update: the new time level copied over the old one, two fields
extern "C" __global__ void copy2(double* u, double* v, const double* un, const double* vn,
                                 int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    u[i] = un[i];
    v[i] = vn[i];
  }
}
"""

REFUSED = r"""
extern "C" __global__ void tiled(const float* in, float* out, int n) {
  __shared__ float t[34];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  t[threadIdx.x + 1] = in[i];
  __syncthreads();
  out[i] = t[threadIdx.x] + t[threadIdx.x + 2];
}
extern "C" __global__ void branchy(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { if (in[i] > 0.0f) out[i] = in[i]; else out[i] = -in[i]; }
}
extern "C" __global__ void radius(const float* in, float* out, int n, int r) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float s = 0.0f;
  for (int k = -r; k <= r; k++) s += in[i + k];
  if (i >= r && i < n - r) out[i] = s;
}
extern "C" __global__ void scatter(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) atomicAdd(&out[i + 1], in[i]);
}
extern "C" __global__ void rooted(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = sqrtf(in[i]);
}
extern "C" __global__ void mirrored(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + in[i < n - 1 ? i + 1 : n - 2];
}
extern "C" __global__ void strided(const float* in, float* out, int n, int m) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    out[i] = i < m ? in[i] : 0.0f;
}
extern "C" __global__ void mixed(const float* in, float* out, int n, int m) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m) out[i] = in[i]; else if (i < n) out[i] = 0.0f;
}
extern "C" __global__ void below(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x - 1;
  if (i >= 0 && i < n) out[i] = in[i];
}
extern "C" __global__ void origin(const float* in, float* out, int n, int lo) {
  int i = blockIdx.x * blockDim.x + threadIdx.x + lo;
  if (i < n) out[i] = 2.0f * in[i];
}
extern "C" __global__ void crossed(const float* in, float* out, int nx, int ny, int nz) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  int k = blockIdx.z * blockDim.z + threadIdx.z;
  if (i >= 1 && i < nx - 1 && j < nx - 2 && k < nz) out[(k * ny + j) * nx + i] = in[(k * ny + j) * nx + i - 1];
}
extern "C" __global__ void racy(float* u, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) u[i] = 0.5f * (u[i - 1] + u[i + 1]);
}
extern "C" __global__ void unguarded(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i + 1] - in[i];
}
"""


@dataclass(frozen=True)
class Case:
    """How to launch one test kernel: its parameters in order, as ``("buf", dtype, name)``,
    ``("int", value)`` or ``("f32"/"f64", value)``, the grid (x first) and the block."""

    entry: str
    params: tuple[tuple[object, ...], ...]
    shape: tuple[int, ...]  # numpy shape of every grid buffer (z, y, x)
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    small: Mapping[int, int] = field(default_factory=dict)  # param -> element count (scalars)
    fixed: Mapping[int, tuple[float, ...]] = field(default_factory=dict)  # param -> contents


def _g(n: int, b: int) -> int:
    return (n + b - 1) // b


NX, NY, NZ = 12, 10, 9
CASES = {
    "coef3d": Case("coef3d", (("buf", "float64"), ("buf", "float64"), ("buf", "float64"),
                              ("f64", 0.05), ("int", NX), ("int", NY), ("int", NZ)),
                   (NZ, NY, NX), (_g(NX, 4), _g(NY, 4), _g(NZ, 4)), (4, 4, 4)),
    "pair2d": Case("pair2d", (("buf", "float32"),) * 4 + (("f32", 0.3), ("f32", 0.7),
                                                            ("int", 14), ("int", 11)),
                   (11, 14), (_g(14, 8), _g(11, 8), 1), (8, 8, 1)),
    "jacobi_res": Case("jacobi_res", (("buf", "float32"),) * 3 + (("int", 13),), (13, 13),
                       (_g(13, 8), _g(13, 8), 1), (8, 8, 1), {2: 1}),
    "wave": Case("wave", (("buf", "float64"),) * 2 + (("int", 12), ("int", 9)), (9, 12),
                 (_g(12, 8), _g(9, 8), 1), (8, 8, 1)),
    "inplace": Case("inplace", (("buf", "float32"),) * 2 + (("f32", 0.2), ("int", 40)), (40,),
                    (_g(40, 16), 1, 1), (16, 1, 1)),
    "advect": Case("advect", (("buf", "float32"),) * 2 + (("f32", 0.4), ("int", 37)), (37,),
                   (_g(37, 16), 1, 1), (16, 1, 1)),
    "conv_rows": Case("conv_rows", (("buf", "float32"),) * 2 + (("int", 15), ("int", 7)),
                      (7, 15), (_g(15, 8), 1, 1), (8, 8, 1)),
    "hot2d": Case("hot2d", (("buf", "float32"),) * 3 + (("int", 13), ("int", 11), ("f32", 0.5),
                                                          ("f32", 0.2), ("f32", 0.3)),
                  (11, 13), (_g(13, 8), _g(11, 8), 1), (8, 8, 1)),
    "sig3": Case("sig3", (("buf", "float64"),) * 3 + (("int", NX), ("int", NY), ("int", NZ)),
                 (NZ, NY, NX), (_g(NX, 4), _g(NY, 4), _g(NZ, 4)), (4, 4, 4),
                 {2: 3 * NX * NY * NZ}),
    "table1d": Case("table1d", (("buf", "float32"),) * 3 + (("int", 30),), (30,),
                    (_g(30, 16), 1, 1), (16, 1, 1), {2: 3}, {2: (0.5, 0.2, 0.05)}),
    "half2d": Case("half2d", (("buf", "float16"),) * 2 + (("int", 14), ("int", 12)), (12, 14),
                   (_g(14, 8), _g(12, 8), 1), (8, 8, 1)),
    "burgers": Case("burgers", (("buf", "float64"),) * 4 + (("int", 13), ("int", 11),
                                                            ("f64", 0.05), ("f64", 0.1)),
                    (11, 13), (_g(11, 8), _g(9, 8), 1), (8, 8, 1)),
    "hyper": Case("hyper", (("buf", "float32"),) * 4 + (("f32", 0.5), ("int", NX), ("int", NY),
                                                         ("int", NZ)),
                  (NZ, NY, NX), (_g(NX, 4), _g(NY, 4), _g(NZ, 4)), (4, 4, 4)),
    "gray": Case("gray", (("buf", "float32"),) * 4 + (("int", 45), ("f32", 0.04), ("f32", 0.06)),
                 (45,), (2, 1, 1), (8, 1, 1)),
    "copy2": Case("copy2", (("buf", "float64"),) * 4 + (("int", 37),), (37,), (3, 1, 1),
                  (16, 1, 1)),
    "zmarch": Case("zmarch", (("buf", "float32"),) * 2 + (("int", NX), ("int", NY), ("int", NZ)),
                   (NZ, NY, NX), (_g(NX, 8), _g(NY, 8), 1), (8, 8, 1)),
}
CONSTANTS = {"wc": [0.1, 0.2, 0.4, 0.2, 0.1], "c2": 0.15}


def scalars(case: Case) -> dict[int, float]:
    """The scalar parameters' values by index (what the oracle's ``params`` takes)."""
    return {i: float(p[1]) for i, p in enumerate(case.params) if p[0] != "buf"}  # type: ignore[arg-type]


@dataclass
class EmulatedTarget:
    """A probe target that launches a test kernel on the host emulator."""

    case: Case
    source: str = SOURCE
    dtype: str | None = None
    runs: int = 0

    def __post_init__(self) -> None:
        self.module = emulate.compile_source(self.source, [self.case.entry])
        rng = np.random.default_rng(11)
        n = int(np.prod(self.case.shape))
        self.prologue: dict[int, np.ndarray] = {}
        for i, p in enumerate(self.case.params):
            if p[0] == "buf":
                count = self.case.small.get(i, n)
                values = self.case.fixed.get(i) or rng.uniform(0, 1, count)
                self.prologue[i] = np.asarray(values).astype(str(p[1])).view(np.uint8)
        after = self._launch({})
        self.buffers = tuple(ProbeBuffer(i, a.size, not np.array_equal(after[i], a), region=i)
                             for i, a in self.prologue.items())
        self.ints = tuple(int(p[1]) for p in self.case.params if p[0] in ("int", "i64"))  # type: ignore[call-overload]

    def _launch(self, contents: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        bufs = {i: np.array(contents.get(i, a), dtype=np.uint8, copy=True)
                for i, a in self.prologue.items()}
        args = []
        for i, p in enumerate(self.case.params):
            if p[0] == "buf":
                args.append(bufs[i].view(str(p[1])))
            else:
                dt = {"int": np.int32, "i64": np.int64, "f32": np.float32,
                      "f64": np.float64}[str(p[0])]
                args.append(np.array(p[1], dtype=dt))
        self.module.launch(self.case.entry, args, self.case.grid, self.case.block)
        return bufs

    def run(self, contents: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        self.runs += 1
        return self._launch(contents)
