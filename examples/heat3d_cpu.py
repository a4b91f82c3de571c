"""A 3D heat-equation time loop on the CPU backend: the example application of kernforge.

Explicit Euler on an n^3 grid with fixed (Dirichlet) faces. Every step launches two kernels:
``heat_step`` (7-point Laplacian update of the interior) and ``apply_boundary`` (re-imposes the
face temperatures); every ``--diag-every`` steps a third, ``max_change``, reduces the largest
change of the step. The program prints a checksum of the final field, identical whether it runs
plain (``python examples/heat3d_cpu.py``) or under ``kernforge record -- python ...``.
"""

from __future__ import annotations

import argparse
import hashlib

import numpy as np

import kernforge

HEAT_STEP = r"""
#include <stddef.h>
#ifndef CENTER_WEIGHT
#define CENTER_WEIGHT 6.0
#endif
#ifndef TILE_J
#define TILE_J 16
#endif

void heat_step(const double *restrict u, double *restrict v,
               int nx, int ny, int nz, double alpha)
{
    const ptrdiff_t sy = nx, sz = (ptrdiff_t)nx * ny;
    #pragma omp parallel for collapse(2)
    for (int k = 1; k < nz - 1; k++) {
        for (int jj = 1; jj < ny - 1; jj += TILE_J) {
            int jend = jj + TILE_J < ny - 1 ? jj + TILE_J : ny - 1;
            for (int j = jj; j < jend; j++) {
                const ptrdiff_t row = k * sz + j * sy;
                for (int i = 1; i < nx - 1; i++) {
                    const ptrdiff_t c = row + i;
                    double lap = u[c - 1] + u[c + 1] + u[c - sy] + u[c + sy]
                               + u[c - sz] + u[c + sz] - CENTER_WEIGHT * u[c];
                    v[c] = u[c] + alpha * lap;
                }
            }
        }
    }
}
"""

APPLY_BOUNDARY = r"""
void apply_boundary(double *restrict v, int nx, int ny, int nz, double hot, double cold)
{
    const long sy = nx, sz = (long)nx * ny;
    #pragma omp parallel for
    for (int k = 0; k < nz; k++)
        for (int j = 0; j < ny; j++)
            for (int i = 0; i < nx; i++)
                if (i == 0 || j == 0 || k == 0 || i == nx - 1 || j == ny - 1 || k == nz - 1)
                    v[k * sz + j * sy + i] = (k == 0) ? hot : cold;
}
"""

MAX_CHANGE = r"""
#include <math.h>
void max_change(const double *restrict u, const double *restrict v, double *restrict out, long n)
{
    double m = 0.0;
    #pragma omp parallel for reduction(max:m)
    for (long i = 0; i < n; i++) {
        double d = fabs(v[i] - u[i]);
        if (d > m) m = d;
    }
    out[0] = m;
}
"""


def run(n: int = 128, steps: int = 20, diag_every: int = 5, threads: int | None = None,
        quiet: bool = False) -> np.ndarray:
    """Run the time loop; returns the final temperature field."""
    step = kernforge.Kernel(HEAT_STEP, "heat_step", backend="cpu", options={"opt_level": "O2"})
    bound = kernforge.Kernel(APPLY_BOUNDARY, "apply_boundary", backend="cpu")
    diag = kernforge.Kernel(MAX_CHANGE, "max_change", backend="cpu")
    rng = np.random.default_rng(0)
    u = rng.random((n, n, n))  # C order: index [k, j, i]
    v = np.empty_like(u)
    change = np.zeros(1)
    alpha = 0.1  # stable for alpha <= 1/6
    bound(u, n, n, n, 1.0, 0.0, threads=threads)
    for s in range(steps):
        step(u, v, n, n, n, alpha, threads=threads)
        bound(v, n, n, n, 1.0, 0.0, threads=threads)
        if diag_every and (s + 1) % diag_every == 0:
            diag(u, v, change, u.size, threads=threads)
            if not quiet:
                print(f"step {s + 1:4d}  max change {change[0]:.6e}")
        u, v = v, u
    return u


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=128, help="grid points per axis (default 128)")
    ap.add_argument("--steps", type=int, default=20, help="time steps (default 20)")
    ap.add_argument("--diag-every", type=int, default=5, help="steps between diagnostics")
    ap.add_argument("--threads", type=int, default=None, help="OpenMP threads (default: all)")
    args = ap.parse_args(argv)
    u = run(args.n, args.steps, args.diag_every, args.threads)
    digest = hashlib.sha256(np.ascontiguousarray(u).tobytes()).hexdigest()[:16]
    print(f"final mean {u.mean():.12f}  checksum {digest}")


if __name__ == "__main__":
    main()
