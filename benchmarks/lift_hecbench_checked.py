#!/usr/bin/env python3
"""Are HeCBench's kernels lifted from their real source RIGHT? (CPU only, host emulator.)

Each kernel below is lifted from its source (``kernforge.apps.lift_source``; the kernel's text
read from a HeCBench checkout with the macros of its build) and run on the CUDA host emulator
(``kernforge.stencil.emulate``) with the launch shape of its ``main`` on random contents in
every buffer (two seeds). The lifted program's float64 oracle must give every written grid
within the program's error bound (``error_bound``: any order of operations), every reduction
within 1e-5, and leave every other buffer as it was. Printed per kernel: the program's summary
and ``agrees`` or ``DISAGREES`` (largest error against its bound), or why it is not lifted;
then the counts. Exit status 1 when a lifted kernel disagrees (a wrong lift).

    python benchmarks/lift_hecbench_checked.py --hec /work/hecsrc/src
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from kernforge.apps.lift_regions import Lifted
from kernforge.apps.lift_source import lift_source
from kernforge.stencil.program import apply, error_bound

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lift_hecbench_emulated import Kernel, Target, against_oracle, kernel_text, kernels

F32, F64 = "float32", "float64"


def more(n: int) -> list[Kernel]:
    """Kernels lifted by the fixes after the emulated benchmark's table was written."""
    cells = 1000  # over a grid of 2 blocks of 64: the grid-stride loops take 8 turns
    lulesh = "typedef double Real_t;\ntypedef int Index_t;\n"
    bx, by = 20, 14
    return [
        Kernel("heat-cuda/heat.cu", "zero", "", [("int", n), ("buf", F64, n * n, 0, 0)],
               (-(-n * n // 256), 1, 1), (256, 1, 1)),
        Kernel("reaction-cuda/kernels.cu", "reaction_gray_scott", "",
               [("buf", F32, cells, r, 0) for r in range(4)]
               + [("int", cells), ("f32", 0.0367), ("f32", 0.0649)], (2, 1, 1), (64, 1, 1)),
        Kernel("reaction-cuda/kernels.cu", "construct_laplacian", "",
               [("buf", F32, cells, r, 0) for r in range(4)] + [("int", cells), ("f32", 0.16)],
               (2, 1, 1), (64, 1, 1)),
        Kernel("reaction-cuda/kernels.cu", "update", "",
               [("buf", F32, cells, r, 0) for r in range(6)] + [("int", cells), ("f32", 0.25)],
               (2, 1, 1), (64, 1, 1)),
        Kernel("lulesh-cuda/lulesh.cu", "fill_sig", lulesh,
               [("buf", F64, cells, r, 0) for r in range(5)] + [("int", cells)],
               (-(-cells // 256), 1, 1), (256, 1, 1)),
        Kernel("lulesh-cuda/lulesh.cu", "calcPositionForNodes", lulesh,
               [("buf", F64, cells, r, 0) for r in range(6)] + [("f64", 0.01), ("int", cells)],
               (-(-cells // 256), 1, 1), (256, 1, 1)),
        Kernel("burger-cuda/kernels.h", "core", "#define idx(i,j)   (i)*x_points+(j)\n",
               [("buf", F64, bx * by, r, 0) for r in range(4)]
               + [("int", bx), ("int", by), ("f64", 0.01), ("f64", 0.001), ("f64", 0.05),
                  ("f64", 0.04)], ((bx - 2 + 15) // 16, (by - 2 + 15) // 16, 1), (16, 16, 1)),
        Kernel("burger-cuda/kernels.h", "update", "",
               [("buf", F64, bx * by, r, 0) for r in range(4)] + [("int", bx * by)],
               (-(-bx * by // 256), 1, 1), (256, 1, 1)),
    ]


def extent(text: str, ints: dict[str, int]) -> int:
    """An extent of :class:`Lifted` (``n*n``, ``nx``: products and sums of integer
    parameters) at the launch's values."""
    total = 0
    for term in text.replace(" - ", " + -").split(" + "):
        value, sign = 1, -1 if term.startswith("-") else 1
        for f in term.lstrip("-").split("*"):
            value *= int(f) if f.strip().isdigit() else ints[f.strip()]
        total += sign * value
    return total


def check(k: Kernel, r: Lifted, code: str, seed: int) -> tuple[bool, str]:
    """The kernel on the emulator against the program's oracle: (agrees, detail)."""
    t = Target(k, code)
    ints = {n: int(k.params[i][1]) for n, i in r.sizes.items()}
    shape = tuple(reversed([extent(e, ints) for e in r.extents]))
    size = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    contents = {i: rng.uniform(-1, 1, p[2]).astype(p[1]) for i, p in enumerate(k.params)
                if p[0] == "buf"}
    after = t.run({i: a.view(np.uint8) for i, a in contents.items()})
    got = {i: after[i].view(k.params[i][1]).astype(np.float64) for i in after}
    comp = dict(r.components)
    arrays = {n: contents[i][comp.get(n, 0) * size:(comp.get(n, 0) + 1) * size]
              .astype(np.float64).reshape(shape) for n, i in r.fields.items()}
    params = {i: float(p[1]) for i, p in enumerate(k.params) if p[0] in ("f32", "f64")}
    consts = {n: list(contents[i].astype(np.float64)) for n, i in r.tables.items()}
    before = {n: float(contents[i][0]) for n, i in r.reductions.items()}
    res = apply(r.program, arrays, params=params, constants=consts, reductions=before)
    bound = error_bound(r.program, arrays, params=params, constants=consts)
    def output(name: str) -> np.ndarray:
        c = comp.get(name, 0)
        return got[r.fields[name]][c * size:(c + 1) * size].reshape(shape)

    ok, detail = against_oracle(res, bound, output, lambda n: got[r.reductions[n]][0])
    if not ok:
        return ok, detail
    written = {r.fields[n] for n in res.outputs} | set(r.reductions.values())
    for i in set(contents) - written:
        if not np.array_equal(got[i], contents[i].astype(np.float64)):
            return False, f"parameter {i} changed, which the program does not write"
    return True, detail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hec", type=Path, required=True, help="HeCBench's src directory")
    a = ap.parse_args(argv)
    lifted = agree = 0
    for k in kernels(32, 20) + more(32):
        code = k.prelude + kernel_text(a.hec / k.file, k.name).replace(
            "__global__", 'extern "C" __global__', 1)
        r = lift_source(code, k.name)
        print(f"== {k.file} {k.name}")
        if not isinstance(r, Lifted):
            print(f"   not lifted: {r.reason}")
            continue
        lifted += 1
        print("   " + r.program.describe().replace("\n", "\n   "))
        results = [check(k, r, code, seed) for seed in (1, 2)]
        ok = all(x for x, _ in results)
        agree += ok
        print(f"   {'agrees' if ok else 'DISAGREES'}: " + "; ".join(d for _, d in results))
    print(f"\n{agree} of {lifted} kernels lifted from source agree with their oracle on the "
          "host emulator")
    return 0 if agree == lifted else 1


if __name__ == "__main__":
    sys.exit(main())
