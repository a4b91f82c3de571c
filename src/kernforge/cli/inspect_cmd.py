"""``kernforge inspect PATH``: what a recording holds."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from ..pipeline.units import describe_units
from ..record import clean_partial
from ..replay.cache_protocol import protocol_for
from .checks import load_all_units
from .native_cmd import print_native_inspect
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


def run(args: argparse.Namespace) -> int:
    if args.clean:
        for p in clean_partial(args.path):
            console.print(f"removed partial unit {p}")
    units = load_all_units(args.path)
    recs = units.recordings
    if args.json:
        print(json.dumps(describe_units(units), indent=2, default=str))
        return 0
    if units.native:
        print_native_inspect(units.native)
        if not recs:
            return 0
    table = Table(title=f"{len(recs)} recorded launch(es) in {args.path}")
    for col in ("unit", "kernel", "backend", "launch", "options", "written", "size", "cache"):
        table.add_column(col)
    for r in recs:
        launch = (f"threads={r.launch.threads or 'default'}" if r.backend == "cpu"
                  else f"grid={r.launch.grid} block={r.launch.block}")
        opts = " ".join(f"{k}={v}" for k, v in r.options.values)
        written = ", ".join(a.name for a in r.args if a.written) or "-"
        table.add_row(r.name, r.source.entry, r.backend, launch, opts, written, _mib(r.nbytes),
                      protocol_for(r).protocol)
    console.print(table)
    for r in recs:
        c = protocol_for(r)
        console.print(f"  {r.name}: replayed with the cache {c.protocol} ({c.reason})",
                      markup=False, soft_wrap=True)
    if args.args:
        for r in recs:
            t = Table(title=f"{r.name}: arguments")
            for col in ("name", "kind", "dtype", "shape / value", "written", "policy"):
                t.add_column(col)
            for a in r.args:
                shape = str(a.shape) if a.is_array else repr(a.value)
                t.add_row(a.name, a.kind, a.dtype, shape, "yes" if a.written else "",
                          a.policy.mode if a.is_array else "")
            console.print(t)
    return 0
