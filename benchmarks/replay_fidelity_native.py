#!/usr/bin/env python3
"""Replay fidelity of every native unit of real programs, in the cache state each was given.

Per program of a JSON list: ``kernforge record --max-instances 1`` (each kernel's first launch
of the run, its in-program time measured with events by the interposer on later launches of
the same work), then ``kernforge replay --json`` with the default ``--cache auto`` (each unit
replayed flushed and warm, the one nearer its in-program time kept, with both figures as its
reason). Prints per unit the in-program time, the replayed median, their ratio and the
protocol, then its grid, the bytes of the allocations it touches and which launches its
in-program time is of; a summary of units within ``--band`` (default 10%) under the chosen
protocol and under the flushed one alone. Units without an in-program time (none was measured)
are counted apart. Writes ``OUT/fidelity.json``.

    python benchmarks/replay_fidelity_native.py benchmarks/public_programs/programs.json \\
        --out fid-run

``programs.json``: ``[{"name": ..., "cwd": ..., "command": [...], "tolerance": null}, ...]``;
``cwd`` may hold ``$VARIABLES`` (``$HECBENCH``: a directory of built HeCBench binaries) and is
relative to the repository's root otherwise. Needs a GPU and the programs' own dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KF = [sys.executable, "-m", "kernforge"]
FLUSHED = re.compile(r"flushed [\d.e+]+ us \(([\d.]+)x\)")


def _launch(unit: Path) -> dict[str, Any]:
    """The unit's geometry, the bytes of its regions and which launches its in-program time
    is of (its manifest's ``capture``)."""
    try:
        m = json.loads((unit / "manifest.json").read_text())
    except (OSError, ValueError):
        return {"grid": None, "footprint_kib": 0.0, "app_time_of": None}
    cap = m.get("capture") or {}
    return {"grid": m.get("launch", {}).get("grid"),
            "footprint_kib": sum(r["size"] for r in m.get("regions", [])) / 1024,
            "app_time_of": cap.get("app_time_of"),
            "recorded_launch_ms": cap.get("recorded_launch_ms")}


def one(p: dict[str, Any], out: Path, timeout: float) -> list[dict[str, Any]]:
    cwd = ROOT / os.path.expandvars(p["cwd"])
    rec, js = out / "rec" / p["name"], out / f"{p['name']}.json"
    r = subprocess.run([*KF, "record", "-o", str(rec), "--max-instances", "1", "--",
                        *p["command"]], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       check=False)
    print(f"== {p['name']}: record exit {r.returncode}", flush=True)
    tol = ["--tolerance", p["tolerance"]] if p.get("tolerance") else []
    subprocess.run([*KF, "replay", str(rec), "--json", str(js), *tol], capture_output=True,
                   text=True, timeout=timeout, check=False)
    rows = []
    for u in json.loads(js.read_text()) if js.is_file() else []:
        app, med = u.get("app_time_ms"), u.get("median")
        cache = u.get("cache") or {}
        m = FLUSHED.search(cache.get("reason", ""))
        row = {"program": p["name"], "unit": u["unit"], "status": u.get("status"),
               "app_ms": app, "replay_ms": med * 1e3 if med else None,
               "protocol": cache.get("protocol"), "by": cache.get("by"),
               "flushed_ratio": float(m.group(1)) if m else None, **_launch(rec / u["unit"])}
        row["ratio"] = row["replay_ms"] / app if app and row["replay_ms"] else None
        rows.append(row)
        ratio = f"{row['ratio']:.3f}" if row["ratio"] else "  -  "
        print(f"  {u['unit'][:44]:44} {row['status']!s:8} in program "
              f"{(app or 0) * 1e3:9.2f} us  replay/program {ratio}  {row['protocol']}\n"
              f"      grid {row['grid']} {row['footprint_kib']:.0f} KiB; in-program time of "
              f"{row['app_time_of']}", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("programs", type=Path)
    ap.add_argument("--out", type=Path, default=Path("fidelity-run"))
    ap.add_argument("--band", type=float, default=0.10)
    ap.add_argument("--timeout", type=float, default=300.0, help="per command (s)")
    ap.add_argument("--only", default="", help="comma-separated program names (default all)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    only = {n for n in a.only.split(",") if n}
    for p in json.loads(a.programs.read_text()):
        if only and p["name"] not in only:
            continue
        rows += one(p, a.out, a.timeout)
        (a.out / "fidelity.json").write_text(json.dumps(rows, indent=1))
    timed = [r for r in rows if r["ratio"]]
    near = sum(abs(r["ratio"] - 1) <= a.band for r in timed)
    flushed = sum(r["flushed_ratio"] is not None and abs(r["flushed_ratio"] - 1) <= a.band
                  for r in timed)
    print(f"within {a.band:.0%} of the in-program time: {near} of {len(timed)} units under the "
          f"chosen protocol, {flushed} under the flushed one alone; "
          f"{len(rows) - len(timed)} units without an in-program time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
