"""``kernforge inspect PATH``: what a recording holds."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..pipeline.units import describe_units
from ..record import clean_partial
from .checks import load_all_units
from .output import console


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show what recordings hold",
                       description="List the replay units under PATH (a recordings directory "
                                   "or one unit) with their kernel, launch, options and "
                                   "arguments. Every manifest is validated on the way.")
    p.add_argument("path", help="a recordings directory or one recorded unit")
    p.add_argument("--args", action="store_true", help="also list every argument")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--clean", action="store_true",
                   help="delete partial units left behind by an interrupted recorder")
    p.set_defaults(func=run)


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.2f} MiB"


def _row(d: dict[str, Any]) -> list[str]:
    """One unit's row, from what it says of itself (``Unit.describe``): a unit that holds a
    module image shows its geometry, image and regions; one that holds source its launch,
    options and written arguments."""
    if "image_kind" in d:
        seq = d.get("sequence")
        kernel = d["name"][:50] + (f" (sequence: {len(seq['launches'])} launches)"
                                   if seq else "")
        launch = f"grid={tuple(d['grid'])} block={tuple(d['block'])} smem={d['shared_mem']}"
        src = d.get("source")
        holds = d["image_kind"] + (f" + {src['origin']} source" if src else "")
        regions = d["regions"]
        written = f"{sum(1 for g in regions if g['written'])} of {len(regions)} regions"
    else:
        lc = d["launch"]
        kernel = d["kernel"]
        launch = (f"threads={lc.get('threads') or 'default'}" if d["backend"] == "cpu"
                  else f"grid={tuple(lc['grid'])} block={tuple(lc['block'])}")
        holds = " ".join(["source", *(f"{k}={v}" for k, v in d["options"].items())])
        written = ", ".join(a["name"] for a in d["args"] if a["written"]) or "-"
    return [escape(Path(d["path"]).name), escape(kernel), d["backend"], launch, escape(holds),
            escape(written), _mib(d["bytes"]), d["cache"]["protocol"]]


def _details(d: dict[str, Any]) -> Table:
    """``--args``: a unit's arguments by name, or its parameter bytes."""
    name = Path(d["path"]).name
    if "image_kind" in d:
        t = Table(title=f"{escape(name)}: parameters ({d['param_bytes']} B)")
        for col in ("offset", "size", "points into region"):
            t.add_column(col)
        for p in d["params"]:
            t.add_row(str(p["offset"]), str(p["size"]),
                      ", ".join(map(str, p["points_into"])) or "-")
        return t
    t = Table(title=f"{escape(name)}: arguments")
    for col in ("name", "kind", "dtype", "shape / value", "written", "policy"):
        t.add_column(col)
    for a in d["args"]:
        array = a["kind"] == "array"
        t.add_row(a["name"], a["kind"], a["dtype"], str(tuple(a["shape"])) if array else "",
                  "yes" if a["written"] else "", a["policy"]["mode"] if array else "")
    return t


def run(args: argparse.Namespace) -> int:
    if args.clean:
        for p in clean_partial(args.path):
            console.print(f"removed partial unit {p}")
    described = describe_units(load_all_units(args.path))
    if args.json:
        print(json.dumps(described, indent=2, default=str))
        return 0
    table = Table(title=f"{len(described)} recorded launch(es) in {escape(str(args.path))}")
    for col in ("unit", "kernel", "backend", "launch", "holds", "written", "size", "cache"):
        table.add_column(col)
    for d in described:
        table.add_row(*_row(d))
    console.print(table)
    for d in described:
        c = d["cache"]
        console.print(f"  {Path(d['path']).name}: replayed with the cache {c['protocol']} "
                      f"({c['reason']})", markup=False, soft_wrap=True)
    if args.args:
        for d in described:
            console.print(_details(d))
    return 0
