"""Print what M3a did with each program's time loop (apps/loop_sequence.py), from finished
``kernforge app run`` / ``app batch`` directories: per unit, the path that won (or none), the
recorded sequence (launches of the kernel, why it ended, the step's other kernels) or why none
was recorded, why the fused step was refused, where each path's time went (its GPU child's
phases: apps/phases.py) and M4's fused launches per dataset.

    python benchmarks/m3a_loop_rows.py runs/m3seq/batch/apps/*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernforge.apps.phases import summary
from kernforge.apps.store import AppStore


def _short(text: object, width: int = 160) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= width else s[: width - 3] + "..."


def show(run: Path) -> None:
    store = AppStore.open(run)
    try:
        app, m3a, m4 = store.app(), store.milestone("M3a"), store.milestone("M4")
    finally:
        store.close()
    print(f"== {run.name}: {app.state if app else '?'}")
    for r in (m3a.figures.get("kernels") if m3a else None) or []:
        unit = Path(r["unit"])
        print(f"  {unit.parent.name}/{unit.name} {r['kernel'][:50]}: "
              + (f"{r['path']} {r['speedup']:.2f}x" if r.get("matched") else "not matched"))
        seq = r.get("sequence")
        if isinstance(seq, dict):
            print(f"    sequence: {seq['steps']} launches of the kernel, ended {seq['ended']}, "
                  f"other kernels {seq['other_kernels']}")
        elif seq:
            print(f"    sequence: {_short(seq)}")
        why = (r.get("refused") or {}).get("fused step")
        if why and why != seq:
            print(f"    fused step refused: {_short(why)}")
        if r.get("unfused_steps"):
            print(f"    held launches run unfused run {_short(r['unfused_steps'])}")
        if r.get("wall_s") is not None:
            print(f"    M3a on this unit: {r['wall_s']:.1f} s")
        for path, figures in (r.get("phases") or {}).items():
            print(f"    {summary(path, figures)}")
    for d in (m4.figures.get("datasets") if m4 else None) or []:
        if "fused_groups" in d:
            print(f"  M4 {d['dataset']}: {d['fused_groups']} fused launches, "
                  f"{d.get('flushed_unfused')} run unfused ({d.get('flushed_one_launch')} "
                  f"as the one-launch operator), speedup {d.get('speedup')}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="app run directories (each holds app.db)")
    args = p.parse_args(argv)
    missing = [r for r in args.runs if not (r / "app.db").is_file()]
    if missing:
        p.error(f"no app run at {', '.join(map(str, missing))} (no app.db): give the "
                "directories of `kernforge app run --out` or OUT/batch/apps/*")
    for run in args.runs:
        show(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
