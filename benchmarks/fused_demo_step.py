#!/usr/bin/env python3
"""The demo application's whole time step fused on a GPU (issue 42, boundary kernels folded).

examples/heat3d_cupy.py launches per step ``heat_stencil`` (u -> un) then ``apply_boundary``
for axis 0, 1, 2 on un. This records a sequence unit of its time loop from the unchanged
program (``kernforge record --sequence S --kernels heat_stencil``, ``--diag-every 0``: the
per-step reduction reads both grids into a third buffer, which no fused operator folds), then
``fuse_unit``: the stencil recognized by probing its first launch, the three boundary launches
of the first step lifted to face rules by probing, fused candidates for each T of ``--steps``
built with the rules folded, each verified against the recorded sequence's first T steps (all
four kernels per step, as recorded) from the recorded state and from fresh inputs, and the
best timed against those T recorded steps, interleaved (L2 flushed, memory restored).

Run on a GPU machine with CuPy::

    python benchmarks/fused_demo_step.py --n 256 --out /tmp/fdemo

It prints the recognized stencil, the folded face rules, the fused operator, and one fused
launch against T unfused steps (4 T launches) with the 99% CI, or why nothing was fused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernforge.apps.operator_match import FusedMatch, fuse_unit
from kernforge.pipeline.run_app import record_command

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "heat3d_cupy.py"


def record(out: Path, n: int, sequence: int, dtype: str) -> Path:
    cmd = [sys.executable, str(EXAMPLE), "--n", str(n), "--steps", str(sequence + 6),
           "--diag-every", "0", "--dtype", dtype]
    status, units, problems, _ = record_command(cmd, out, kernels="heat_stencil",
                                                max_instances=1, skip=2, sequence=sequence)
    if status != 0 or problems or not units:
        raise SystemExit(f"recording failed: status {status}, problems {problems}, "
                         f"units {units}")
    return units[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="grid points per axis (demo: 256)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--steps", default="3,5,7", help="the T tried (odd)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/fused_demo_step"))
    ap.add_argument("--unit", type=Path, help="a recorded sequence unit (skip recording)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--passes", type=int, default=7)
    args = ap.parse_args()
    steps = tuple(int(s) for s in args.steps.split(","))
    unit = args.unit or record(args.out / "rec", args.n, max(steps) + 1, args.dtype)
    print(f"unit: {unit}")
    m = fuse_unit(unit, out_dir=args.out / "fused", steps=steps, repeat=args.repeat,
                  passes=args.passes, band=-1.0)
    for row in m.tried:
        print("  tried", json.dumps(row, default=str))
    if not isinstance(m, FusedMatch):
        print(f"NOT FUSED: {m.reason}")
        return 1
    print(m.note)
    print(f"fused T={m.steps}: {m.speedup:.3f}x over {m.steps} unfused steps "
          f"({4 * m.steps} launches) [99% CI {m.ci[0]:.3f}, {m.ci[1]:.3f}]; "
          f"{m.gcells_s or 0:.1f} GCells/s fused; spec {m.spec_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
