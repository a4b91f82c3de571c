#!/usr/bin/env python3
"""HeCBench stencil kernels lifted on the host emulator (no GPU): from their source, and by
probing them as the replayed kernel would be probed (docs/stencil-programs.md).

The kernels are read from a HeCBench checkout at run time (``--hec``, the ``src`` directory)
and run by the CUDA host emulator (``kernforge.stencil.emulate``) on small grids, with the
macros and launch shapes of their ``main``. Printed per kernel: what lifting the source gives
(or why not) and what probing gives, with the number of launches it took.

Run::

    python benchmarks/lift_hecbench_emulated.py --hec /work/hecsrc/src
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernforge.apps.lift_probe import Probed, lift_probe
from kernforge.apps.lift_source import lift_source
from kernforge.apps.probe import ProbeBuffer
from kernforge.stencil import emulate
from kernforge.stencil.program import expr as ex


def kernel_text(path: Path, name: str) -> str:
    """The ``__global__`` function ``name`` of a file, braces balanced."""
    src = path.read_text()
    starts = [m.start() for m in re.finditer(rf"__global__[^;{{]*?\b{name}\s*\(", src)
              if re.match(r"[^;{]*\{", src[m.end():])]  # a definition, not a declaration
    if not starts:
        raise ValueError(f"no __global__ {name} defined in {path}")
    i = starts[0]
    depth, j = 0, src.index("{", i)
    for k in range(j, len(src)):
        depth += {"{": 1, "}": -1}.get(src[k], 0)
        if depth == 0:
            return src[i:k + 1]
    raise ValueError(f"unbalanced braces in {name}")


@dataclass
class Kernel:
    """One kernel: its file, prelude (macros), parameters (``("buf", dtype, elements,
    region, offset[, fill])`` or ``("int"/"i64"/"f32"/"f64", value)``) and launch."""

    file: str
    name: str
    prelude: str
    params: list[tuple[Any, ...]]
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


class Target:
    """A kernel on the host emulator as a probe target; buffers that share a region are views
    of one array (pointers into one allocation)."""

    def __init__(self, k: Kernel, code: str) -> None:
        self.k, self.runs = k, 0
        self.module = emulate.compile_source(code, [k.name])
        rng = np.random.default_rng(1)
        self.regions: dict[int, np.ndarray] = {}
        bufs = []
        for i, p in enumerate(k.params):
            if p[0] == "buf":
                _, dt, n, region, off = p[:5]
                size = max(n + off, self.regions[region].size if region in self.regions else 0)
                self.regions[region] = rng.uniform(0, 1, size).astype(dt)
                if len(p) > 5:  # the value the program fills it with (iso2dfd's velocity)
                    self.regions[region][:] = p[5]
        before = {r: a.copy() for r, a in self.regions.items()}
        self._launch(self.regions)
        for i, p in enumerate(k.params):
            if p[0] == "buf":
                _, dt, n, region, off = p[:5]
                written = not np.array_equal(before[region], self.regions[region])
                bufs.append(ProbeBuffer(i, (self.regions[region].size - off) * np.dtype(dt).itemsize,
                                        written, region))
        self.regions = before
        self.buffers = tuple(bufs)
        self.ints = tuple(int(p[1]) for p in k.params if p[0] in ("int", "i64"))
        self.dtype: str | None = None

    def _launch(self, regions: Mapping[int, np.ndarray]) -> None:
        args = []
        for p in self.k.params:
            if p[0] == "buf":
                args.append(regions[p[3]][p[4]:])
            else:
                args.append(np.array(p[1], dtype={"int": np.int32, "i64": np.int64, "f32": np.float32,
                                                  "f64": np.float64}[p[0]]))
        self.module.launch(self.k.name, args, self.k.grid, self.k.block)

    def run(self, contents: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        self.runs += 1
        regions = {r: a.copy() for r, a in self.regions.items()}
        for i, raw in contents.items():
            _, dt, _, region, off = self.k.params[i][:5]
            vals = np.asarray(raw, dtype=np.uint8).view(dt)
            regions[region][off:off + vals.size] = vals
        self._launch(regions)
        return {i: regions[p[3]][p[4]:].view(np.uint8).copy()
                for i, p in enumerate(self.k.params) if p[0] == "buf"}


def against_oracle(res: Any, bound: Mapping[str, np.ndarray],
                   output: Callable[[str], np.ndarray], scalar: Callable[[str], float]
                   ) -> tuple[bool, str]:
    """The kernel's outputs (``output(name)``, its reductions ``scalar(name)``) against the
    lifted program's oracle ``res`` within ``bound``: (agrees, detail)."""
    worst = (0.0, "")
    for name, want in res.outputs.items():
        err = np.abs(output(name) - want)
        if not np.all(err <= bound[name] + 1e-300):
            i = int(np.argmax(err - bound[name]))
            return False, (f"{name} off by {err.reshape(-1)[i]:.3g} at element {i}, bound "
                           f"{bound[name].reshape(-1)[i]:.3g}")
        worst = max(worst, (float(err.max()), name))
    for name, value in res.reductions.items():
        have = scalar(name)
        if not np.isclose(have, value, rtol=1e-5, atol=1e-6):
            return False, f"reduction {name} is {have}, oracle {value}"
    return True, f"largest error {worst[0]:.3g} ({worst[1]})"


def kernels(n2: int, n3: int) -> list[Kernel]:
    vol = n3 ** 3
    fd = (32 + 8) * (16 + 8) * (12 + 8) + 28  # fdtd3d: dimx 32, dimy 16, dimz 12, radius 4
    f64, f32 = "float64", "float32"
    return [
        Kernel("heat-cuda/heat.cu", "solve", "",
               [("int", n2), ("f64", 0.1), ("f64", 0.01), ("f64", 0.001), ("f64", 0.1),
                ("f64", 0.6), ("buf", f64, n2 * n2, 0, 0), ("buf", f64, n2 * n2, 1, 0)],
               (-(-n2 * n2 // 256), 1, 1), (256, 1, 1)),
        Kernel("heat2d-cuda/main.cu", "dev_lapl_iter", "",
               [("buf", f32, n2 * n2, 0, 0), ("buf", f32, n2 * n2, 1, 0), ("f32", 0.0096),
                ("f32", 0.96), ("int", n2), ("int", n2)],
               (n2 * n2 // 64, 1, 1), (64, 1, 1)),
        Kernel("jacobi-cuda/main.cu", "jacobi_step",
               f"#define N {n2}\n#define IDX(i, j) ((i) + (j) * N)\n",
               [("buf", f32, n2 * n2, 0, 0), ("buf", f32, n2 * n2, 1, 0), ("buf", f32, 1, 2, 0)],
               (n2 // 16, n2 // 16, 1), (16, 16, 1)),
        Kernel("stencil3d-cuda/main.cu", "stencil3d",
               "#define BSIZE 16\n#define XTILE 20\ntypedef double Real;\n",
               [("buf", f64, vol, 0, 0), ("buf", f64, vol, 1, 0), ("buf", f64, 3 * vol, 2, 0),
                ("buf", f64, 3 * vol, 2, 3 * vol), ("buf", f64, 3 * vol, 2, 6 * vol),
                ("int", n3), ("int", n3), ("int", n3)],
               (-(-(n3 - 2) // 20), -(-(n3 - 2) // 14), -(-(n3 - 2) // 14)), (16, 16, 1)),
        Kernel("fdtd3d-cuda/FDTD3dGPU.cu", "finite_difference",
               "#define k_blockDimMaxX 32\n#define k_blockDimMaxY 16\n#define k_radius_default 4\n",
               [("buf", f32, fd, 0, 0), ("buf", f32, fd, 1, 0), ("buf", f32, 5, 2, 0),
                ("int", 32), ("int", 16), ("int", 12), ("int", 28)], (1, 1, 1), (32, 16, 1)),
        Kernel("hotspot-cuda/kernel.h", "calc_temp",
               "#define BLOCK_SIZE 16\n#define IN_RANGE(x, min, max) ((x)>=(min) && (x)<=(max))\n",
               [("int", 1), ("buf", f32, n2 * n2, 0, 0), ("buf", f32, n2 * n2, 1, 0),
                ("buf", f32, n2 * n2, 2, 0), ("int", n2), ("int", n2), ("int", 1), ("int", 1),
                ("f32", 0.5), ("f32", 1.0), ("f32", 1.0), ("f32", 10.0), ("f32", 0.1)],
               (-(-n2 // 14), -(-n2 // 14), 1), (16, 16, 1)),
        Kernel("hotspot-cuda/kernel.h", "calc_temp",  # the datasets' pyramid height 2
               "#define BLOCK_SIZE 16\n#define IN_RANGE(x, min, max) ((x)>=(min) && (x)<=(max))\n",
               [("int", 2), ("buf", f32, 36 * 36, 0, 0), ("buf", f32, 36 * 36, 1, 0),
                ("buf", f32, 36 * 36, 2, 0), ("int", 36), ("int", 36), ("int", 2), ("int", 2),
                ("f32", 0.5), ("f32", 1.0), ("f32", 1.0), ("f32", 10.0), ("f32", 0.1)],
               (3, 3, 1), (16, 16, 1)),
        Kernel("iso2dfd-cuda/iso2dfd.cu", "iso_2dfd_kernel", "#define HALF_LENGTH 1\n",
               [("buf", f32, n2 * n2, 0, 0), ("buf", f32, n2 * n2, 1, 0),
                ("buf", f32, n2 * n2, 2, 0, 2.25e6), ("f32", 1e-8), ("i64", n2), ("i64", n2)],
               (n2 // 16, n2 // 16, 1), (16, 16, 1)),
        Kernel("hotspot3D-cuda/3D.cu", "hotspot3d", "",
               [("buf", f32, 64 * 16 * 8, 0, 0), ("buf", f32, 64 * 16 * 8, 1, 0),
                ("buf", f32, 64 * 16 * 8, 2, 0), ("int", 64), ("int", 16), ("int", 8)]
               + [("f32", v) for v in (0.1, 0.1, 0.05, 0.05, 0.02, 0.02, 0.66, 0.3)],
               (1, 4, 1), (64, 4, 1)),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hec", type=Path, required=True, help="HeCBench's src directory")
    ap.add_argument("--n2", type=int, default=32, help="2D grids: n2 x n2 (a multiple of 16)")
    ap.add_argument("--n3", type=int, default=20, help="3D grids: n3^3")
    a = ap.parse_args(argv)
    for k in kernels(a.n2, a.n3):
        body = kernel_text(a.hec / k.file, k.name)
        code = k.prelude + body.replace("__global__", 'extern "C" __global__', 1)
        s = lift_source(code, k.name)
        print(f"== {k.file} {k.name}\nfrom source: "
              + (s.program.describe() if hasattr(s, "program") else f"refused: {s.reason}"))
        t = Target(k, code)
        start = time.perf_counter()
        r = lift_probe(t)
        took = time.perf_counter() - start
        if isinstance(r, Probed):
            terms = len(ex.polynomial(r.program.outputs[0].expr))
            print(f"by probing ({t.runs} launches, {took:.1f} s on the emulator): "
                  f"{len(r.fields)} fields, {terms} terms, grid {r.shape} at elements "
                  f"{dict(r.offsets)}, tables {dict(r.tables)}\n{r.program.describe()}")
        else:
            print(f"by probing ({t.runs} launches): refused: {r.reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
