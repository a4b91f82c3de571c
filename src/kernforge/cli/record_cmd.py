"""``kernforge record -o DIR [filters] -- python app.py ARGS``: record an unchanged application."""

from __future__ import annotations

import argparse

from ..pipeline.run_app import record_application
from .output import console


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="run an application and record its kernel launches",
                       description="Run an unchanged Python application with the recorder "
                                   "(and, when CuPy is importable, the CuPy hooks) installed "
                                   "before it is imported; every launch of a kernforge.Kernel, "
                                   "cupy.RawKernel or cupy.RawModule kernel that matches the "
                                   "filters becomes a replay unit.")
    p.add_argument("-o", "--out", default="recordings", help="recordings directory "
                                                            "(default: recordings)")
    p.add_argument("--kernels", default=None, metavar="PATTERN",
                   help="record only kernels whose name matches this glob pattern")
    p.add_argument("--max-instances", type=int, default=4, metavar="N",
                   help="record at most N launches per kernel (default 4)")
    p.add_argument("--skip", type=int, default=0, metavar="N",
                   help="skip the first N launches of each kernel (default 0)")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the application command, after --")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    status, paths = record_application(command, args.out, kernels=args.kernels,
                                       max_instances=args.max_instances, skip=args.skip)
    console.print(f"recorded {len(paths)} kernel launch(es) into {args.out}"
                  + ("" if status == 0 else f" (the application exited with status {status})"),
                  markup=False)
    for p in paths:
        console.print(f"  {p}", markup=False)
    return status
