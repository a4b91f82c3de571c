"""Weighted Jacobi iterations for a 2D Poisson problem in CuPy (a second GPU example).

Each iteration launches ``jacobi_step`` (a ``cupy.RawKernel``, 2D blocks: the 5-point update
into a scratch array) and ``relax`` (a ``cupy.RawModule`` function, 1D: u += omega * (v - u)).
Both bounds-check their index, so their launch geometry can be tuned. Prints a checksum of the
final field, identical plain or under ``kernforge record -- python examples/jacobi2d_cupy.py``.
"""

from __future__ import annotations

import argparse
import hashlib

import cupy as cp
import numpy as np

STEP = r"""
extern "C" __global__ void jacobi_step(const float* __restrict__ u, const float* __restrict__ f,
                                       float* __restrict__ v, int n, float h2)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= n || j >= n) return;
    const long long c = (long long)j * n + i;
    if (i == 0 || j == 0 || i == n - 1 || j == n - 1) { v[c] = u[c]; return; }
    v[c] = 0.25f * (u[c - 1] + u[c + 1] + u[c - n] + u[c + n] - h2 * f[c]);
}
"""

RELAX = r"""
extern "C" __global__ void relax(float* __restrict__ u, const float* __restrict__ v,
                                 float omega, long long count)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) u[i] = u[i] + omega * (v[i] - u[i]);
}
"""


def run(n: int = 2048, steps: int = 20) -> cp.ndarray:
    step = cp.RawKernel(STEP, "jacobi_step")
    relax = cp.RawModule(code=RELAX).get_function("relax")
    rng = np.random.default_rng(0)
    u = cp.asarray(rng.random((n, n), dtype=np.float32))
    f = cp.asarray(rng.standard_normal((n, n), dtype=np.float32))
    v = cp.empty_like(u)
    h2 = np.float32(1.0 / (n - 1) ** 2)
    block2, block1 = (32, 8), 256
    grid2 = ((n + block2[0] - 1) // block2[0], (n + block2[1] - 1) // block2[1])
    grid1 = ((u.size + block1 - 1) // block1,)
    for _ in range(steps):
        step(grid2, block2, (u, f, v, n, h2))
        relax(grid1, (block1,), (u, v, np.float32(0.8), u.size))
    cp.cuda.get_current_stream().synchronize()
    return u


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048, help="grid points per axis (default 2048)")
    ap.add_argument("--steps", type=int, default=20, help="iterations (default 20)")
    args = ap.parse_args(argv)
    u = run(args.n, args.steps).get()
    digest = hashlib.sha256(u.tobytes()).hexdigest()[:16]
    print(f"jacobi2d_cupy n={args.n} steps={args.steps} mean={float(u.mean()):.9f} "
          f"checksum={digest}")


if __name__ == "__main__":
    main()
