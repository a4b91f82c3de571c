"""``kernforge app run MANIFEST --out DIR [--resume]`` and ``kernforge app report DIR... -o
REPORT.md``: real applications through the states and milestones (docs/applications.md).
``app draft`` and ``app batch`` are registered from :mod:`.app_batch_cmd`."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..apps.manifest import load_manifest
from ..apps.report import write_report
from ..apps.workflow import AppRun
from ..core import ConfigError
from . import app_batch_cmd
from .checks import writable_dir, writable_file
from .output import console, wrapped
from .progress import line_progress

INCONCLUSIVE_EXIT = 9  # an inconclusive speed verdict, as for kernforge integrity validate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("app", help="take an application through the integration workflow",
                       description="Applications: build, run and check an unchanged program "
                                   "(M1), record it and measure each kernel's share (M2), "
                                   "integrate operators, tuned kernels or an agent's change "
                                   "(M3), and measure it end to end on every dataset (M4). "
                                   "States: PENDING -> OUT_OF_SCOPE, BLOCKED, RESEARCH, "
                                   "DROPPED, INCONCLUSIVE or INTEGRATED. See "
                                   "docs/applications.md.")
    sp = p.add_subparsers(dest="app_command", metavar="SUBCOMMAND")
    r = sp.add_parser("run", help="run the workflow on one application manifest")
    r.add_argument("manifest", type=Path, help="the application's TOML manifest")
    r.add_argument("--out", type=Path, required=True, help="the run directory (app.db, logs)")
    r.add_argument("--resume", action="store_true",
                   help="continue the run in --out; settled milestones are not redone")
    r.add_argument("--agent", default=None, metavar="COMMAND",
                   help="the agent command of M3c (overrides [integrate] agent)")
    r.set_defaults(func=run)
    rep = sp.add_parser("report", help="a Markdown report (and PNG) of application runs")
    rep.add_argument("dirs", type=Path, nargs="+", help="run directories of kernforge app run")
    rep.add_argument("-o", "--out", type=Path, default=Path("applications.md"),
                     help="the report (default applications.md; the chart beside it, .png)")
    rep.set_defaults(func=report)
    app_batch_cmd.register(sp)
    p.set_defaults(func=lambda args: _help(p))


def _help(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def run(args: argparse.Namespace) -> int:
    manifest = load_manifest(args.manifest)
    writable_dir(args.out, "--out")
    with line_progress(console, enabled=True) as lines:  # also on a terminal: a long run
        final = AppRun(manifest, args.out, resume=args.resume, agent=args.agent,
                       progress=lines.step).run()
    console.print(wrapped(f"{final.name}: {final.state}: {final.reason}", console.width),
                  markup=False, soft_wrap=True)
    return INCONCLUSIVE_EXIT if final.state == "INCONCLUSIVE" else 0


def report(args: argparse.Namespace) -> int:
    if args.out.suffix != ".md":
        raise ConfigError(f"-o {args.out}: the report is Markdown", hint="end it in .md")
    writable_file(str(args.out), "-o")
    md, png = write_report(list(args.dirs), args.out)
    console.print(f"report: {md}\nchart:  {png}", markup=False)
    return 0
