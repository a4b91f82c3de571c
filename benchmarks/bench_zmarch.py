"""Time the offline ``zmarch`` rewrite of examples/heat3d_cupy.py's stencil against the original
on the GPU (CuPy events, n = 256 fp32, 10 warm-up launches, then 5 x 200 launches, median of the
five means) for several blocks and z points per thread; every variant's output is compared
bitwise with the original's. Prints one line per (variant, block).

    python benchmarks/bench_zmarch.py [--n 256]
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import cupy as cp
import numpy as np

from kernforge.backends.cuda_tuning import coarsened
from kernforge.core import LaunchConfig
from kernforge.evolve.proposers.zmarch import zmarch

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = [(32, 4, 2), (32, 8, 1), (64, 4, 1), (32, 16, 1), (64, 8, 1), (128, 4, 1)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256)
    n = ap.parse_args().n
    text = (ROOT / "examples" / "heat3d_cupy.py").read_text()
    orig = "typedef float real_t;\n" + re.search(r'STENCIL = r"""(.*?)"""', text,
                                                  re.DOTALL)[1]  # type: ignore[index]
    rewritten = zmarch(orig, "cuda")
    assert rewritten is not None
    u = cp.random.random((n, n, n), dtype=cp.float32)
    out = cp.empty_like(u)
    args = (u, out, np.float32(0.1), n)

    def time_us(fn: cp.RawKernel, grid: tuple[int, ...], block: tuple[int, ...]) -> float:
        for _ in range(10):
            fn(grid, block, args)
        e0, e1, means = cp.cuda.Event(), cp.cuda.Event(), []
        for _ in range(5):
            e0.record()
            for _ in range(200):
                fn(grid, block, args)
            e1.record()
            e1.synchronize()
            means.append(cp.cuda.get_elapsed_time(e0, e1) / 200 * 1e3)
        return float(np.median(means))

    plain = cp.RawKernel(orig, "heat_stencil", options=("-std=c++17",))
    for b in BLOCKS:
        grid = tuple(-(-n // x) for x in b)
        print(f"original        block {b}: {time_us(plain, grid, b):7.2f} us")
    plain(tuple(-(-n // x) for x in BLOCKS[0]), BLOCKS[0], args)
    want = out.copy()
    for zc in (1, 2, 4, 8, 16, 32):
        k = cp.RawKernel(rewritten, "heat_stencil", options=("-std=c++17", f"-DKF_ZC={zc}"))
        for b in BLOCKS:
            full = LaunchConfig(grid=tuple(-(-n // x) for x in b), block=b)
            grid = coarsened(full, zc).grid
            out.fill(0)
            k(grid, b, args)
            same = bool(cp.array_equal(out.view(cp.uint32), want.view(cp.uint32)))
            print(f"zmarch KF_ZC={zc:<2} block {b}: {time_us(k, grid, b):7.2f} us "
                  f"{'bitwise identical' if same else 'DIFFERS'}")


if __name__ == "__main__":
    main()
