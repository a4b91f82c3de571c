#!/usr/bin/env python3
"""Lifting stencil programs by probing recorded application kernels, on a GPU machine.

Per recorded native unit (one launch recorded from an unchanged program by ``kernforge
record``): the unit is placed on the device as its replay places it and probed through
operator matching's ``ReplayTarget`` by ``kernforge.apps.lift_probe.lift_probe``
(docs/stencil-programs.md), in a child process of its own (a kernel that faults on a probe
costs only that process). Printed per unit: the lifted program (fields with their parameter
indices, the formula per output, the face rules, reductions, coefficient tables) or the
reason it is refused, the launches the probing took and the seconds.

Run (record with operator matching's benchmark first, or ``kernforge record``)::

    python benchmarks/operator_match.py --hecbench .kfdev/hec --record-to /tmp/R \\
        --out /tmp/opm --json /tmp/opm/summary.json
    python benchmarks/lift_units.py /tmp/R/jacobi:jacobi_step /tmp/R/stencil3d:stencil3d \\
        /tmp/R/heat:solve /tmp/R/heat2d:dev_lapl_iter /tmp/R/fdtd3d --json /tmp/lift.json

A positional argument is ``RECORDING_DIR[:NAME]``: every native unit under the directory whose
directory name starts with NAME (all units without it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def units(arg: str) -> list[Path]:
    root, _, name = arg.partition(":")
    found = sorted(p.parent for p in Path(root).glob("*/manifest.json")
                   if not name or p.parent.name.startswith(name))
    if not found:
        print(f"no units under {root} named {name or '*'}", file=sys.stderr)
    return found


def child(unit: str) -> dict[str, Any]:
    """Lift one unit (in this process: the parent runs it as a child)."""
    from kernforge.apps.lift_probe import Probed, lift_probe
    from kernforge.apps.operator_gpu import ReplayTarget, pointer_table
    from kernforge.record.native_format import read_native
    from kernforge.replay.native import NativeReplay

    rec = read_native(unit)
    t = ReplayTarget(NativeReplay(rec))
    for b in t.buffers:
        if (n := pointer_table(rec, b.region)) > 0:
            return {"refused": f"parameter {b.param} points to memory holding {n} device "
                               "pointers (a table of pointers, not a grid)"}
    runs = 0
    inner = t.run

    def counted(contents: Any) -> Any:
        nonlocal runs
        runs += 1
        return inner(contents)
    t.run = counted  # type: ignore[method-assign]
    start = time.perf_counter()
    r = lift_probe(t)
    out: dict[str, Any] = {"runs": runs, "seconds": round(time.perf_counter() - start, 2),
                           "globals": sum(1 for g in rec.regions if g.kind == "global")}
    if isinstance(r, Probed):
        out.update(program=r.program.describe(), json=r.program.to_json(),
                   fields=dict(r.fields), offsets=dict(r.offsets),
                   reductions=dict(r.reductions), shape=list(r.shape), dtype=r.dtype,
                   tables={str(k): list(v) for k, v in r.tables.items()})
    else:
        out["refused"] = r.reason
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("units", nargs="*", help="RECORDING_DIR[:NAME]")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per unit")
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child)))
        return 0
    results = {}
    for arg in a.units:
        for u in units(arg):
            try:
                p = subprocess.run([sys.executable, __file__, "--child", str(u)],
                                   capture_output=True, text=True, timeout=a.timeout,
                                   check=False)
                lines = p.stdout.strip().splitlines()
                res = json.loads(lines[-1]) if p.returncode == 0 and lines else \
                    {"refused": f"the probe process failed (exit {p.returncode}): "
                                f"{p.stderr.strip()[-400:]}"}
            except subprocess.TimeoutExpired:
                res = {"refused": f"probing took more than {a.timeout:.0f} s"}
            results[str(u)] = res
            head = f"{u}: {res.get('runs', '-')} launches, {res.get('seconds', '-')} s"
            print(head + "\n" + (res.get("program") or f"  refused: {res['refused']}"),
                  flush=True)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
