#!/usr/bin/env python3
"""Operators generated for lifted stencil programs on recorded application kernels (issue 39),
on a GPU machine.

Per recorded native unit (one launch recorded from an unchanged program by ``kernforge
record``): ``kernforge.apps.operator_match.lift_unit`` lifts the kernel's stencil program (from
its source when the recording holds it, else by probing the replayed kernel), generates the
operators of every design for it (docs/stencil-programs.md), accepts those whose adapter
matches the recorded outputs and the original kernel on fresh random inputs, and times the
fastest against the original, interleaved (L2 flushed, written memory restored). Printed per
kernel: the design that won, its replay speedup over the original with the 99% CI, and its
fraction of the device's copy bandwidth (the bytes the program must move: each field read once
and each field written once, over the operator's median time, over the copy kernel's
bandwidth measured in the same process); or why nothing was accepted. A spec is written only
when the win passes the deployment gate.

Run (HeCBench built outside the repository: ``$HECBENCH/<name>-cuda/main``)::

    python benchmarks/lifted_operators.py --hecbench $HECBENCH --record-to /tmp/RL \\
        --out /tmp/lifted --json /tmp/lifted/summary.json

(``--only jacobi``: that program alone; ``--search-trials 16``: after the presets, the forge's
search over the designs' knobs evaluates up to 16 more candidates per kernel, and the table
says which operator it chose and how it compared with the best preset interleaved), or on
recordings made before:
``python benchmarks/lifted_operators.py /tmp/RL/jacobi:jacobi --out /tmp/lifted`` (``RECORDING_DIR[:NAME]``: the units whose directory name starts with NAME).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

KF = [sys.executable, "-m", "kernforge"]
# name: (arguments, the kernel's unit name) as benchmarks/operator_match.py runs them
HECBENCH = {
    "jacobi": ([], "jacobi_step"),
    "stencil3d": (["512", "100"], "stencil3d"),
    "fdtd3d": (["--dimx=192", "--dimy=184", "--timesteps=90"], "finite_difference"),
    "iso2dfd": (["1024", "1024", "10"], "iso_2dfd_kernel"),
    # the manifests' datasets (benchmarks/hecbench/manifests), fewer steps
    "hotspot3D": (["128", "8", "20", "hotspot3D-data/power_128x8", "hotspot3D-data/temp_128x8",
                   "/tmp/hotspot3D-lifted.out"], "hotspot3d"),
    "rtm8": (["10"], "rtm8"),
}


def record(root: Path, to: Path, only: list[str] | None = None) -> list[str]:
    out = []
    for name, (args, unit) in HECBENCH.items():
        if only and name not in only:
            continue
        exe = (root / f"{name}-cuda").resolve()
        if not exe.is_file():
            exe = exe / "main"
        if not exe.is_file():
            print(f"skipped {name}: no {exe}", file=sys.stderr)
            continue
        done = subprocess.run([*KF, "record", "-o", str(to / name), "--max-instances", "1",
                               "--", str(exe), *args], cwd=exe.parent, capture_output=True,
                              text=True, check=False)
        print(f"recorded {name}: exit {done.returncode} {done.stderr.strip()[-300:]}",
              flush=True)
        out.append(f"{to / name}:{unit}")
    return out


def units(arg: str) -> list[Path]:
    root, _, name = arg.partition(":")
    found = sorted(p.parent for p in Path(root).glob("*/manifest.json")
                   if not name or p.parent.name.startswith(name))
    if not found:
        print(f"no units under {root} named {name or '*'}", file=sys.stderr)
    return found


def row(unit: Path, out: Path, repeat: int, passes: int, search: int = 0) -> dict[str, Any]:
    from kernforge.apps.operator_match import NoMatch, lift_unit

    m = lift_unit(unit, out_dir=out / unit.name, repeat=repeat, passes=passes,
                  search_trials=search)
    if isinstance(m, NoMatch):
        return {"unit": unit.name, "refused": m.reason, "program": m.recognized,
                "tried": list(m.tried)}
    f = m.figures or {}
    return {"unit": unit.name, "design": f.get("design"), "operator": f.get("operator"),
            "speedup": m.speedup, "ci": list(m.ci),
            "copy_fraction": f.get("copy_fraction"), "how": f.get("how"),
            "search": f.get("search"),
            "spec": str(m.spec_path), "note": m.note, "tried": list(m.tried)}


def searched(s: dict[str, Any] | None) -> str:
    """The search's outcome in a cell: the operator chosen, against the best preset."""
    if not s:
        return "-"
    if "refused" in s:
        return f"refused: {s['refused'][:80]}"
    vs = f", {s['vs_preset']:.2f}x the best preset" if s.get("vs_preset") else ""
    return f"{s.get('evaluations')} trials: {s.get('chosen')}{vs}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [("| kernel | design | speedup over the original [99% CI] | fraction of copy "
              "bandwidth | lifted | search |"), "|---|---|---|---|---|---|"]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['unit']} | - | refused: {r['refused'][:160]} | - | - | - |")
            continue
        frac = f"{r['copy_fraction']:.2f}" if r.get("copy_fraction") is not None else "-"
        lines.append(f"| {r['unit']} | {r['design']} | {r['speedup']:.2f}x "
                     f"[{r['ci'][0]:.2f}, {r['ci'][1]:.2f}] | {frac} | {r['how']} | "
                     f"{searched(r.get('search'))} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recordings", nargs="*", help="RECORDING_DIR[:NAME]")
    ap.add_argument("--hecbench", type=Path, default=os.environ.get("HECBENCH"),
                    help="DIR holding <name>-cuda/main (default $HECBENCH)")
    ap.add_argument("--record-to", type=Path, default=Path("/tmp/RL"))
    ap.add_argument("--only", nargs="+", choices=sorted(HECBENCH),
                    help="record and lift only these programs")
    ap.add_argument("--out", type=Path, required=True, help="specs and adapter images")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--search-trials", type=int, default=0,
                    help="candidates the knob search evaluates past the presets (0: none)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    recs = list(a.recordings)
    if a.hecbench and not recs:
        recs = record(Path(a.hecbench), a.record_to, a.only)
    rows = [row(u, a.out, a.repeat, a.passes, a.search_trials) for r in recs for u in units(r)]
    print(table(rows))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(rows, indent=1, default=str))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
