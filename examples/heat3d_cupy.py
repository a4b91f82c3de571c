"""A 3D heat-equation time loop in CuPy: the GPU example application of kernforge.

Explicit Euler on an n^3 grid. The hot face z=0 is held at a fixed temperature (Dirichlet),
the other faces are insulated (zero flux: the face copies its inner neighbour). Every step
launches:

- ``heat_stencil`` (a ``cupy.RawKernel``, extern "C"): the 7-point Laplacian update u -> un;
- ``apply_boundary`` (``cupy.RawModule``, extern "C") three times, one axis each: it reads and
  writes the same buffer;
- ``sq_diff_partial<T, 256>`` and ``sum_partials<double, 256>`` (templates of the same
  ``RawModule``, through ``name_expressions``): a deterministic two-pass reduction of
  sum((un - u)^2), the change of the step, every ``--diag-every`` steps.

It prints the final change and a checksum of the final field, identical whether it runs plain
(``python examples/heat3d_cupy.py``) or recorded
(``kernforge record -o recs -- python examples/heat3d_cupy.py``). The checksum is computed on
the device (see :func:`checksum`), so the run's time is the kernels' time, not a copy and a
hash on the host. Scalars are passed the way CuPy applications usually do: Python ints for
``int``/``long long`` parameters (CuPy passes int64), numpy scalars of the field's dtype for
floating-point ones.
"""

from __future__ import annotations

import argparse
import time

import cupy as cp
import numpy as np

BLOCK = (32, 4, 2)
REDUCE_BLOCK = 256
REDUCE_GRID = 1024

STENCIL = r"""
extern "C" __global__ void heat_stencil(const real_t* __restrict__ u, real_t* __restrict__ un,
                                        real_t alpha, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    const int k = blockIdx.z * blockDim.z + threadIdx.z;
    if (i >= n || j >= n || k >= n) return;
    const long long sy = n, sz = (long long)n * n;
    const long long c = k * sz + j * sy + i;
    if (i == 0 || j == 0 || k == 0 || i == n - 1 || j == n - 1 || k == n - 1) {
        un[c] = u[c];
        return;
    }
    const real_t lap = u[c - 1] + u[c + 1] + u[c - sy] + u[c + sy] + u[c - sz] + u[c + sz]
                     - (real_t)6 * u[c];
    un[c] = u[c] + alpha * lap;
}
"""

MODULE = r"""
// the two faces normal to `axis` (0 = z, 1 = y, 2 = x); one thread per (p, q) of the face
extern "C" __global__ void apply_boundary(real_t* __restrict__ u, int n, int axis, real_t hot)
{
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    const int q = blockIdx.y * blockDim.y + threadIdx.y;
    if (p >= n || q >= n) return;
    const long long sz = (long long)n * n, sy = n;
    const long long sa = axis == 0 ? sz : (axis == 1 ? sy : 1);
    const long long sp = axis == 0 ? sy : sz;
    const long long sq = axis == 2 ? sy : 1;
    const long long lo = p * sp + q * sq, hi = lo + (long long)(n - 1) * sa;
    u[lo] = axis == 0 ? hot : u[lo + sa];
    u[hi] = u[hi - sa];
}

template <typename T, int BLOCK>
__global__ void sq_diff_partial(const T* __restrict__ a, const T* __restrict__ b,
                                double* __restrict__ partial, long long n)
{
    __shared__ double s[BLOCK];
    double acc = 0.0;
    for (long long i = (long long)blockIdx.x * BLOCK + threadIdx.x; i < n;
         i += (long long)gridDim.x * BLOCK) {
        const double d = (double)a[i] - (double)b[i];
        acc += d * d;
    }
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int o = BLOCK / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

template <typename T, int BLOCK>
__global__ void sum_partials(const T* __restrict__ partial, T* __restrict__ out, int m)
{
    __shared__ T s[BLOCK];
    T acc = 0;
    for (int i = threadIdx.x; i < m; i += BLOCK) acc += partial[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int o = BLOCK / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = s[0];
}
"""

CTYPES = {"float32": "float", "float64": "double"}


class Heat3D:
    """The kernels, built once for one dtype."""

    def __init__(self, dtype: str = "float32") -> None:
        self.dtype = np.dtype(dtype)
        header = f"typedef {CTYPES[dtype]} real_t;\n"
        self.stencil = cp.RawKernel(header + STENCIL, "heat_stencil", options=("-std=c++17",))
        self.sq_expr = f"sq_diff_partial<{CTYPES[dtype]}, {REDUCE_BLOCK}>"
        self.sum_expr = f"sum_partials<double, {REDUCE_BLOCK}>"
        module = cp.RawModule(code=header + MODULE, options=("-std=c++17",),
                              name_expressions=[self.sq_expr, self.sum_expr])
        self.boundary = module.get_function("apply_boundary")
        self.sq_diff = module.get_function(self.sq_expr)
        self.sum_partials = module.get_function(self.sum_expr)

    def step(self, u: cp.ndarray, un: cp.ndarray, alpha: float, hot: float) -> None:
        n = u.shape[0]
        grid = tuple((n + b - 1) // b for b in BLOCK)
        self.stencil(grid, BLOCK, (u, un, self.dtype.type(alpha), n))
        face = ((n + 15) // 16, (n + 15) // 16)
        for axis in range(3):
            self.boundary(face, (16, 16), (un, n, axis, self.dtype.type(hot)))

    def change(self, u: cp.ndarray, un: cp.ndarray, partial: cp.ndarray,
               out: cp.ndarray) -> None:
        self.sq_diff((REDUCE_GRID,), (REDUCE_BLOCK,), (u, un, partial, u.size))
        self.sum_partials((1,), (REDUCE_BLOCK,), (partial, out, REDUCE_GRID))


def initial_field(n: int, dtype: str) -> cp.ndarray:
    u = cp.zeros((n, n, n), dtype=dtype)
    u[n // 4:n // 2, n // 4:n // 2, n // 4:n // 2] = 1
    return u


def run(n: int = 256, steps: int = 50, dtype: str = "float32", alpha: float = 0.1,
        hot: float = 1.0, diag_every: int = 1) -> tuple[cp.ndarray, float]:
    """Run the time loop; returns the final field and the last step's sum((un - u)^2)."""
    heat = Heat3D(dtype)
    u, un = initial_field(n, dtype), cp.empty((n, n, n), dtype=dtype)
    partial = cp.zeros(REDUCE_GRID, dtype=cp.float64)
    out = cp.zeros(1, dtype=cp.float64)
    for s in range(steps):
        heat.step(u, un, alpha, hot)
        if diag_every and (s + 1) % diag_every == 0:
            heat.change(u, un, partial, out)
        u, un = un, u
    return u, float(out.get()[0])


# One 64-bit hash of every 32-bit word of the field and its index (splitmix64's finalizer of
# index * golden ratio ^ word). An ElementwiseKernel: CuPy builds it, not cupy.RawKernel, so it
# is never recorded, tuned or replaced.
_MIX = cp.ElementwiseKernel(
    "uint32 w", "uint64 h",
    "unsigned long long z = (unsigned long long)i * 0x9E3779B97F4A7C15ull ^ w;"
    " z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;"
    " z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;"
    " h = z ^ (z >> 31);",
    "heat3d_checksum_mix")


def checksum(u: cp.ndarray) -> str:
    """16 hex digits of an exact hash of the field's bytes, computed on the device: the sum,
    modulo 2^64, of the mixed words. Integer addition does not depend on the order of the
    reduction, so bitwise-identical fields always give the same checksum, and a field that
    differs in any bit almost surely gives another one. Only 8 bytes come back to the host."""
    words = cp.ascontiguousarray(u).reshape(-1).view(cp.uint32)
    return f"{int(_MIX(words).sum(dtype=cp.uint64).get()):016x}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="grid points per axis (default 256)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--dtype", choices=sorted(CTYPES), default="float32")
    ap.add_argument("--alpha", type=float, default=0.1, help="D dt / dx^2 (stable <= 1/6)")
    ap.add_argument("--diag-every", type=int, default=1, metavar="K",
                    help="reduce the change of the step every K steps (0 = never)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    u, change = run(args.n, args.steps, args.dtype, args.alpha, diag_every=args.diag_every)
    cp.cuda.get_current_stream().synchronize()
    seconds = time.perf_counter() - t0
    print(f"heat3d_cupy n={args.n} steps={args.steps} dtype={args.dtype} "
          f"change={change:.17g} mean={float(u.mean()):.17g} checksum={checksum(u)}")
    print(f"({seconds:.3f} s including compilation)")


if __name__ == "__main__":
    main()
