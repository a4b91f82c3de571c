"""A CPU application for the workflow's end-to-end test: a 2D five-point smoothing loop whose
kernel the program builds without optimization (``-O0``, as a debug build ships), so tuning
finds a large, reliable win. Prints its own check: the checksum of the final field."""

import argparse

import numpy as np

import kernforge

SMOOTH = r"""
void smooth(const double *restrict u, double *restrict v, int n)
{
    for (int j = 1; j < n - 1; j++)
        for (int i = 1; i < n - 1; i++)
            v[j * n + i] = 0.2 * (u[j * n + i] + u[j * n + i - 1] + u[j * n + i + 1]
                                  + u[(j - 1) * n + i] + u[(j + 1) * n + i]);
}
"""

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=256)
ap.add_argument("--steps", type=int, default=40)
args = ap.parse_args()
k = kernforge.Kernel(SMOOTH, "smooth", backend="cpu", options={"opt_level": "O0"})
u = np.random.default_rng(1).random((args.n, args.n))
v = u.copy()
for _ in range(args.steps):
    k(u, v, args.n)
    u, v = v, u
print(f"checksum {float((u * np.arange(u.size).reshape(u.shape) % 7).sum()):.12f}")
