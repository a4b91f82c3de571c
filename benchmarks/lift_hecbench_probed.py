#!/usr/bin/env python3
"""Are HeCBench's kernels lifted BY PROBING right? (CPU only, host emulator.)

Each kernel of ``lift_hecbench_emulated.py`` and ``lift_hecbench_checked.py`` (and rtm8's
two-wave step, hotspot3D at its datasets' size and magnitudes) is run on the CUDA host emulator as a probe target, lifted by
``kernforge.apps.lift_probe`` (which checks itself on its own fresh runs), and then checked
here independently of the lifter: on fresh contents in every buffer but the coefficient tables
(two seeds; uniform within plus or minus the largest magnitude the buffer was filled with),
the lifted program's float64 oracle must give every written grid within the program's error
bound and every reduction within 1e-5, and every element outside the lifted grids must come
back as it went in. Printed per kernel: the program's summary and ``agrees`` or ``DISAGREES``
(largest error against its bound), or why probing refused it; then the counts. Exit status 1
when a lifted kernel disagrees (a wrong lift is worse than a refusal).

    python benchmarks/lift_hecbench_probed.py --hec /work/hecsrc/src [--only NAME] [--n3 N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from kernforge.apps.lift_probe import Probed, lift_probe
from kernforge.stencil.program import apply, error_bound

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lift_hecbench_checked import more
from lift_hecbench_emulated import Kernel, Target, against_oracle, kernel_text, kernels

F32 = "float32"


def extra() -> list[Kernel]:
    """Kernels probed here only: rtm8 (two wave fields, their image a product of the new
    values; its extents are macros) on a small grid with its radius-4 interior, laplace3d (a
z-march through shared memory, Dirichlet faces) on 40x20x12, and hotspot3D
    on its datasets' 128x128x8 grid filled as they are (temperatures near 323, power near
    0.002: the power term is millionths of the largest)."""
    nx, ny, nz = 24, 20, 18
    vol = nx * ny * nz
    hot, lap = 128 * 128 * 8, 40 * 20 * 12
    rtm = (f"#define nx {nx}\n#define ny {ny}\n#define nz {nz}\n"
           "__device__ int indexTo1D(int x, int y, int z){ return x + y*nx + z*nx*ny; }\n")
    return [
        Kernel("rtm8-cuda/rtm8.cu", "rtm8", rtm,
               [("buf", F32, vol, r, 0) for r in range(6)] + [("buf", F32, 5, 6, 0),
                                                                ("i64", vol)],
               (-(-nx // 16), -(-ny // 16), nz), (16, 16, 1)),
        Kernel("laplace3d-cuda/kernel.h", "laplace3d",
               "#define BLOCK_X 32\n#define BLOCK_Y 8\n#define IOFF 1\n#define JOFF (BLOCK_X+2)\n"
               "#define KOFF (BLOCK_X+2)*(BLOCK_Y+2)\n#define INDEX(i,j,j_off) (i + (j) * (j_off))\n",
               [("int", 40), ("int", 20), ("int", 12), ("int", 40), ("buf", F32, lap, 0, 0),
                ("buf", F32, lap, 1, 0)], (2, 3, 1), (32, 8, 1)),
        Kernel("hotspot3D-cuda/3D.cu", "hotspot3d", "",
               [("buf", F32, hot, 0, 0, 323.0), ("buf", F32, hot, 1, 0, 0.002),
                ("buf", F32, hot, 2, 0), ("int", 128), ("int", 128), ("int", 8)]
               + [("f32", v) for v in (0.1, 0.1, 0.05, 0.05, 0.02, 0.02, 0.66, 0.3)],
               (2, 32, 1), (64, 4, 1)),
    ]


def check(k: Kernel, t: Target, r: Probed, seed: int) -> tuple[bool, str]:
    """The kernel on the emulator against the probed program's oracle: (agrees, detail)."""
    nx, ny, nz = r.shape
    n = nx * ny * nz
    dims = r.program.dims
    shape = tuple(reversed(r.shape[:dims]))
    rng = np.random.default_rng(seed)
    fresh = {}
    for reg, a in t.regions.items():
        top = float(np.abs(a).max()) or 1.0
        fresh[reg] = (rng.uniform(-1, 1, a.size) * top).astype(a.dtype)
    bufs = {i: p for i, p in enumerate(k.params) if p[0] == "buf"}
    tables = set(r.tables)
    for i in tables:  # coefficient tables stay as recorded: the program's numbers came from them
        fresh[bufs[i][3]] = t.regions[bufs[i][3]].copy()
    for i in r.reductions.values():  # a scalar output starts at a value a residual can add to
        fresh[bufs[i][3]] = np.full_like(fresh[bufs[i][3]], 0.75)
    sent = {i: fresh[p[3]][p[4]:].copy() for i, p in bufs.items()}
    after = t.run({i: a.view(np.uint8) for i, a in sent.items()})
    got = {i: after[i].view(bufs[i][1]).astype(np.float64) for i in after}

    def grid(arrays: dict[int, np.ndarray], name: str) -> np.ndarray:
        o = r.offsets[name]
        return arrays[r.fields[name]][o:o + n].astype(np.float64).reshape(shape)

    arrays = {f.name: grid(sent, f.name) for f in r.program.fields}
    before = {name: float(sent[i][0]) for name, i in r.reductions.items()}
    res = apply(r.program, arrays, reductions=before)
    bound = error_bound(r.program, arrays)
    ok, detail = against_oracle(res, bound, lambda name: grid(got, name),
                                lambda name: got[r.reductions[name]][0])
    if not ok:
        return ok, detail
    # everything outside the written grids (and the scalars) comes back as it went in
    outside = {i: np.ones(a.size, dtype=bool) for i, a in got.items()}
    for name in res.outputs:
        outside[r.fields[name]][r.offsets[name]:r.offsets[name] + n] = False
    for i in r.reductions.values():
        outside[i][0] = False
    for i, keep in outside.items():
        if not np.array_equal(got[i][keep], sent[i].astype(np.float64)[keep]):
            return False, f"parameter {i} changed where the program writes nothing"
    return True, detail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hec", type=Path, required=True, help="HeCBench's src directory")
    ap.add_argument("--only", action="append", default=[],
                    help="probe only kernels whose directory or name contains this")
    ap.add_argument("--n3", type=int, default=20, help="stencil3d's grid: n3^3")
    a = ap.parse_args(argv)
    lifted = agree = refused = 0
    for k in kernels(32, a.n3) + more(32) + extra():
        if a.only and not any(s in k.file or s == k.name for s in a.only):
            continue
        code = k.prelude + kernel_text(a.hec / k.file, k.name).replace(
            "__global__", 'extern "C" __global__', 1)
        t = Target(k, code)
        r = lift_probe(t)
        print(f"== {k.file} {k.name} (grid {k.grid}, block {k.block})")
        if not isinstance(r, Probed):
            refused += 1
            print(f"   refused: {r.reason}")
            continue
        lifted += 1
        print("   " + r.program.describe().replace("\n", "\n   "))
        results = [check(k, t, r, seed) for seed in (11, 12)]
        ok = all(x for x, _ in results)
        agree += ok
        print(f"   {'agrees' if ok else 'DISAGREES'}: " + "; ".join(d for _, d in results))
    print(f"\n{agree} of {lifted} kernels lifted by probing agree with their oracle on the host "
          f"emulator; {refused} refused")
    return 0 if agree == lifted else 1


if __name__ == "__main__":
    sys.exit(main())
