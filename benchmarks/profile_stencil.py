"""Launch the dispatched operators of some stencil cells (and a device-to-device copy of the
same size) a few times each, for a profiler to read: ``ncu --clock-control none -k
regex:'zmarch|ztile|planesweep|copy' python benchmarks/profile_stencil.py CELL...``. Prints each
operator's key and CuPy-event time (median of 20) so the profile can be matched to it.
"""

from __future__ import annotations

import argparse

import cupy as cp
import numpy as np

from kernforge.stencil import matrix as mx
from kernforge.stencil.operator import Operator
from kernforge.stencil.spec import Cell

COPY = r"""extern "C" __global__ void copy(const uint4* __restrict__ a, uint4* __restrict__ b,
                                    long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    b[i] = a[i];
}"""


def _time(fn, n: int = 20) -> float:
    a, b = cp.cuda.Event(), cp.cuda.Event()
    out = []
    for _ in range(n):
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b) * 1e3)
    return float(np.median(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cells", nargs="+")
    ap.add_argument("--launches", type=int, default=3, help="launches per operator (profiled)")
    ap.add_argument("--design", default=None,
                    help="this design (its defaults, with the dispatched operator's values of "
                         "the parameters the two share) instead of the dispatched operator")
    ap.add_argument("--set", default="", metavar="K=V,...",
                    help="override parameters of the operator (integers), e.g. lz=16,ty=16")
    args = ap.parse_args()
    over = {k: int(v) for k, v in (kv.split("=") for kv in args.set.split(",") if kv)}
    for cid in args.cells:
        _one(cid, args.launches, args.design, over)


def _operator(cell: Cell, design: str | None, over: dict[str, int]) -> Operator:
    op = mx.operator_for(cell)
    if over:
        op = mx.build(op.design, cell, {**op.params, **over})  # type: ignore[assignment]
        if op is None:
            raise SystemExit(f"{over} does not build {cell.id}")
    if design is None or design == op.design:
        return op
    shared = {k: v for k, v in op.params.items() if k in mx.space(design, cell)}
    other = mx.build(design, cell, {**mx.defaults(design, cell), **shared})
    if other is None:
        raise SystemExit(f"{design} does not build {cell.id} with {shared}")
    return other


def _one(cid: str, launches: int, design: str | None, over: dict[str, int]) -> None:
    cell = Cell.parse(cid)
    op = _operator(cell, design, over)
    dt = cell.precision.dtype
    shape = cell.shape.array_shape
    arrays = {"in": cp.random.random(shape).astype(dt)}
    arrays["out"] = arrays["in"].copy()
    arrays["tmp"] = arrays["in"].copy()
    arrays["coef"] = cp.random.random(shape).astype(dt)
    mod = cp.RawModule(code=op.source, options=tuple(op.options))
    fns = []
    for ln in op.launches:
        k = mod.get_function(ln.entry)
        if ln.shared_bytes > 48 * 1024:
            k.max_dynamic_shared_size_bytes = ln.shared_bytes
        fns.append((k, ln))

    def run() -> None:
        for k, ln in fns:
            k(ln.grid, ln.block, tuple(arrays[a] for a in ln.args),
              shared_mem=ln.shared_bytes)

    copy = cp.RawKernel(COPY, "copy")
    n16 = arrays["in"].nbytes // 16

    def run_copy() -> None:
        copy((132 * 16,), (256,), (arrays["in"], arrays["out"], np.int64(n16)))

    for _ in range(launches):
        run()
        run_copy()
    cp.cuda.runtime.deviceSynchronize()
    t, tc = _time(run), _time(run_copy)
    gb = 2 * arrays["in"].nbytes / 1e9
    print(f"{cid}: {op.key} {t:.1f} us ({gb / t * 1e6:.0f} GB/s), copy {tc:.1f} us "
          f"({gb / tc * 1e6:.0f} GB/s): {100 * tc / t:.1f}% of copy", flush=True)


if __name__ == "__main__":
    main()
