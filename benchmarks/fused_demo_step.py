#!/usr/bin/env python3
"""The demo application's whole time step fused on a GPU (issue 42: boundary kernels folded,
the per-step diagnostic elided).

examples/heat3d_cupy.py at its defaults (``--diag-every 1``) launches per step
``heat_stencil`` (u -> un), ``apply_boundary`` for axis 0, 1, 2 on un, then its change norm:
``sq_diff_partial`` (reads u and un, writes ``partial``) and ``sum_partials`` (reads
``partial``, writes ``out``). This records a sequence unit of its time loop from the unchanged
program (``kernforge record --sequence S --kernels heat_stencil`` with S = max T + 2: the check
of T fused steps needs T+1 whole recorded steps, and a sequence ends at the stencil's S-th
launch), then ``fuse_unit``: the stencil recognized by probing its first launch, the first
step's five companions probed on the sequence's placement (the boundary launches lifted to face
rules and folded, the two reduction launches elided: the step the interposer keeps held after a
fused launch re-runs them), fused candidates for each T of ``--steps`` built with the rules
folded, each verified as a deployment runs it (the fused launch, then the recorded step T+1 as
recorded) against the recorded sequence's first T+1 steps on every region it writes (the grids
under the kernel's tolerance, ``partial`` and ``out`` under the tolerance that follows from
it), from the recorded state and from fresh inputs, and the best timed against the T recorded
steps it replaces (6 T launches), interleaved (L2 flushed, memory restored).

Run on a GPU machine with CuPy::

    python benchmarks/fused_demo_step.py --n 256 --out /tmp/fdemo

It prints the recognized stencil, the folded face rules and the elided kernels, every
candidate tried and the best screen speedup of each design (``temporal``, ``overlap``) for each
T, the fused operator, and one fused launch against T unfused steps with the 99% CI, or why
nothing was fused. ``--diag-every 0`` records the loop without the reduction (4 launches a step).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernforge.apps.operator_match import FusedMatch, fuse_unit
from kernforge.pipeline.run_app import record_command

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "heat3d_cupy.py"


def record(out: Path, n: int, sequence: int, dtype: str, diag_every: int) -> Path:
    cmd = [sys.executable, str(EXAMPLE), "--n", str(n), "--steps", str(sequence + 6),
           "--diag-every", str(diag_every), "--dtype", dtype]
    status, units, problems, _ = record_command(cmd, out, kernels="heat_stencil",
                                                max_instances=1, skip=2, sequence=sequence)
    if status != 0 or problems or not units:
        raise SystemExit(f"recording failed: status {status}, problems {problems}, "
                         f"units {units}")
    return units[0]


def best_screened(tried: tuple[dict, ...]) -> list[tuple[str, int, float | None]]:
    """(design, T, the best screen speedup of its candidates that passed, or None)."""
    best: dict[tuple[str, int], float | None] = {}
    for row in tried:
        key = (str(row["operator"]).split("[")[0], int(row["steps"]))
        got = None if "refused" in row else row.get("screen_speedup")
        old = best.get(key)
        best[key] = got if old is None else old if got is None else max(old, got)
    return [(d, t, b) for (d, t), b in sorted(best.items())]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="grid points per axis (demo: 256)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--steps", default="3,5,7", help="the T tried (odd)")
    ap.add_argument("--diag-every", type=int, default=1, choices=(0, 1),
                    help="the example's diagnostic period (its default 1: every step)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/fused_demo_step"))
    ap.add_argument("--unit", type=Path, help="a recorded sequence unit (skip recording)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--passes", type=int, default=7)
    args = ap.parse_args()
    steps = tuple(int(s) for s in args.steps.split(","))
    unit = args.unit or record(args.out / "rec", args.n, max(steps) + 2, args.dtype,
                               args.diag_every)
    print(f"unit: {unit}")
    m = fuse_unit(unit, out_dir=args.out / "fused", steps=steps, repeat=args.repeat,
                  passes=args.passes, band=-1.0)
    for row in m.tried:
        print("  tried", json.dumps(row, default=str))
    for design, t, best in best_screened(m.tried):
        print(f"  best {design} T={t}: " + (f"{best:.3f}x (screen, one launch against T "
                                             "unfused steps)" if best else "none passed"))
    if not isinstance(m, FusedMatch):
        print(f"NOT FUSED: {m.reason}")
        return 1
    print(m.note)
    per = 6 if args.diag_every == 1 else 4
    print(f"fused T={m.steps}: {m.speedup:.3f}x over {m.steps} unfused steps "
          f"({per * m.steps} launches) [99% CI {m.ci[0]:.3f}, {m.ci[1]:.3f}]; "
          f"{m.gcells_s or 0:.1f} GCells/s fused; spec {m.spec_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
