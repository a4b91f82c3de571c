#!/usr/bin/env python3
"""Fused operators on HeCBench's time loops (issue 42), on a GPU machine.

Per program (heat2d: a 2D 5-point fp32 stencil with periodic boundaries; laplace3d: a 3D
7-point fp32 stencil that copies its boundary), one launch of its kernel is recorded from the
unchanged binary (``kernforge record --max-instances 1``), then for each ``T`` of ``--steps``
``kernforge.apps.operator_match.fuse_unit`` generates the fused candidates, checks each
against the original kernel launched ``T`` times with IN and OUT swapped (recorded state and
fresh inputs), and times the best against ``T`` original launches, interleaved (L2 flushed,
all memory restored before each run). The table: kernel, T, the fused operator, one fused
launch against T original launches [99% CI], the gate's verdict (the one every deployment
passes), and GCells/s (grid points x T per second) fused and original.

Run (``$HECBENCH`` holds ``<name>-cuda/main`` or ``<name>-cuda`` binaries built outside the
repository)::

    python benchmarks/fused_operators.py --hecbench $HECBENCH --record-to /tmp/R \\
        --out /tmp/fused --md /tmp/fused/summary.md --json /tmp/fused/summary.json

A recorded unit may be given instead (``UNIT_DIR``, repeatable): ``--unit /tmp/R/heat2d/dev_lapl_iter-0``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kernforge.apps.operator_match import FusedMatch, fuse_unit
from kernforge.deploy import native as nd
from kernforge.deploy.gate import refusal

KF = [sys.executable, "-m", "kernforge"]

# name: (arguments, the kernel's unit name prefix)
HECBENCH = {
    "heat2d": (["4096", "4096", "100"], "dev_lapl_iter"),
    "laplace3d": (["256", "256", "256", "20", "1"], "laplace3d"),
}


def record(root: Path, to: Path) -> list[tuple[str, Path]]:
    """(program, unit) for each program found under ``root``, one launch recorded."""
    found = []
    for name, (args, unit) in HECBENCH.items():
        exe = (root / f"{name}-cuda").resolve()
        if not exe.is_file():
            exe = exe / "main"
        if not exe.is_file():
            print(f"skipped {name}: no {exe}", file=sys.stderr)
            continue
        out = to / name
        done = subprocess.run([*KF, "record", "-o", str(out), "--max-instances", "1", "--",
                               str(exe), *args], cwd=exe.parent, capture_output=True,
                              text=True, check=False)
        print(f"recorded {name}: exit {done.returncode} {done.stderr.strip()[-300:]}",
              flush=True)
        units = sorted(p.parent for p in out.glob(f"{unit}*/manifest.json"))
        if units:
            found.append((name, units[0]))
        else:
            print(f"no unit {unit}* under {out}", file=sys.stderr)
    return found


def row(name: str, unit: Path, steps: int, out: Path, repeat: int, passes: int
        ) -> dict[str, Any]:
    t0 = time.perf_counter()
    m = fuse_unit(unit, out_dir=out / name, steps=(steps,), repeat=repeat, passes=passes,
                  band=-1.0)  # every measured result, judged below by the real gate
    r: dict[str, Any] = {"kernel": name, "unit": str(unit), "steps": steps,
                         "seconds": time.perf_counter() - t0}
    if not isinstance(m, FusedMatch):
        return {**r, "ok": False, "reason": m.reason, "tried": list(m.tried)}
    ev = nd.read_spec(m.spec_path).entries[0]["evidence"]
    points = ev.get("points")
    return {**r, "ok": True, "operator": ev["operator"], "speedup": m.speedup,
            "ci": list(m.ci), "gcells_fused": m.gcells_s,
            "gcells_original": points * steps / ev["median_original_s"] / 1e9
            if points else None,
            "verdict": refusal(verified=True, idle=None, speedup=m.speedup, ci=m.ci) or
            "deployable", "spec": str(m.spec_path), "tried": list(m.tried),
            "device": ev.get("device"), "arch": ev.get("arch")}


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hecbench", type=Path, default=os.environ.get("HECBENCH"),
                    help="DIR holding <name>-cuda/main programs (default: $HECBENCH)")
    ap.add_argument("--unit", action="append", default=[], type=Path,
                    help="a recorded native unit (instead of recording)")
    ap.add_argument("--record-to", type=Path, default=Path("/tmp/R"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", default="3,5,7,9", help="odd T values, comma-separated")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    args = ap.parse_args(argv)
    units = [(u.name.split("-")[0], u) for u in args.unit]
    if args.hecbench:
        units += record(Path(args.hecbench), args.record_to)
    if not units:
        ap.error("no unit: give --hecbench DIR (or $HECBENCH) or --unit UNIT_DIR")
    rows = []
    for name, unit in units:
        for s in (int(x) for x in args.steps.split(",")):
            r = row(name, unit, s, args.out, args.repeat, args.passes)
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "tried"}, default=str),
                  flush=True)
            for c in r["tried"]:
                print(f"  candidate {c['operator']}: " + (
                    f"{c['screen_speedup']:.3f}x over {s} launches"
                    if c.get("screen_speedup") else f"refused: {c.get('refused')}"), flush=True)
    md = [("| kernel | T | fused operator | fused vs T originals [99% CI] | verdict | "
          "GCells/s fused | GCells/s original |"), "|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["ok"]:
            md.append(f"| {r['kernel']} | {r['steps']} | - | no: {r['reason'][:200]} | - | - "
                      "| - |")
            continue
        md.append(f"| {r['kernel']} | {r['steps']} | {r['operator']} | {r['speedup']:.3f}x "
                  f"[{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | {r['verdict']} | "
                  f"{_num(r['gcells_fused'])} | {_num(r['gcells_original'])} |")
    devices = sorted({json.dumps(r.get("device"), sort_keys=True) for r in rows if r["ok"]})
    md += ["", (f"device: {', '.join(devices) or '-'}; date: "
           f"{time.strftime('%Y-%m-%d', time.gmtime())}; command: {' '.join(sys.argv)}")]
    print("\n".join(md))
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text("\n".join(md) + "\n")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
