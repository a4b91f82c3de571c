"""``kernforge demo``: record the example application, replay, verify, try variants."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from ..core import Status
from ..pipeline.demo import run_demo
from .output import console, fmt_error, fmt_time


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job end to end on the example application",
                       description="Record examples/heat3d_cpu.py, replay and verify every "
                                   "recorded kernel, try compiler/define variants of the "
                                   "hottest one, and show that a wrong variant is caught.")
    p.add_argument("--out", type=Path, default=None, help="run directory (default runs/demo-*)")
    p.add_argument("--app", type=Path, default=None, help="application script to record")
    p.add_argument("--n", type=int, default=128, help="grid points per axis (default 128)")
    p.add_argument("--steps", type=int, default=20, help="time steps (default 20)")
    p.add_argument("--repeat", type=int, default=7, help="timed runs per replay (default 7)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with console.status("starting") as status:
        result = run_demo(args.out, app=args.app, n=args.n, steps=args.steps,
                          repeat=args.repeat, progress=lambda s: status.update(s))
    t = Table(title="1. every recorded kernel, replayed and verified against its recording")
    for col in ("unit", "status", "median", "min", "max", "max error"):
        t.add_column(col)
    for rec, m in result.baseline:
        t.add_row(rec.name, m.status.value, fmt_time(m.median), fmt_time(m.min),
                  fmt_time(m.max), fmt_error(m))
    console.print(t)
    t = Table(title="2. variants of the hottest kernel (speedup: interleaved, 7 passes)")
    for col in ("variant", "status", "median", "speedup vs recorded"):
        t.add_column(col)
    for label, m, sp in result.variants:
        t.add_row(label, m.status.value, fmt_time(m.median if m.ok else None),
                  f"{sp:.2f}x" if sp else "-")
    console.print(t)
    wrong = result.wrong
    assert wrong is not None
    console.print("3. a variant that changes the arithmetic: "
                  f"[bold]{wrong.status.value}[/]")
    for c in wrong.failed_checks:
        console.print(f"   buffer {c.describe()}", markup=False)
    chart = result.chart.name if result.chart else ""
    console.print(f"\nrun directory: {result.run_dir}  (summary.json, {chart})", markup=False)
    ok = all(m.ok for _, m in result.baseline) and wrong.status is Status.WRONG_RESULT
    if not ok:
        console.print("[bold red]demo failed: a recorded kernel did not replay, or the wrong "
                      "variant was not caught[/]")
    return 0 if ok else 1
