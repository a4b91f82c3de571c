"""``kernforge run --deploy SPEC -- python app.py ARGS``: an unchanged application, tuned kernels."""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from rich.markup import escape

from ..core.jsonio import write_json_atomic
from ..deploy import DeployReport, read_spec, use
from ..pipeline.run_app import cupy_hooks_if_available, run_application
from . import native_deploy_cmd
from .checks import writable_file
from .output import err_console


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run an application with a deployment spec active",
                       description="Run an unchanged Python application with a deployment "
                                   "spec (kernforge export) active: launches of kernforge."
                                   "Kernel and CuPy RawKernel/RawModule kernels that match an "
                                   "entry (kernel, device, problem) run the tuned variant, "
                                   "everything else runs unchanged. Which kernels were "
                                   "replaced, and why others were not, is logged once per "
                                   "kernel and summarized at the end (on stderr).")
    p.add_argument("--deploy", required=True, metavar="SPEC", help="the deployment spec")
    p.add_argument("--report", metavar="FILE", default=None,
                   help="also write the deployment report as JSON")
    p.add_argument("--allow-unverifiable", action="store_true",
                   help="deploy a tuned variant even when its first launch cannot be "
                        "re-verified against the original kernel (e.g. aliased arguments); "
                        "by default such a kernel runs the original")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="log only failures of tuned variants, not every kernel's outcome")
    p.add_argument("--print-env", action="store_true",
                   help="native specs: print the shell lines that deploy SPEC into any "
                        "command started after them (for job scripts), and exit")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the application command, after --")
    p.set_defaults(func=run)


@contextlib.contextmanager
def _deploy_log(quiet: bool) -> Iterator[None]:
    """The kernforge.deploy logger to stderr for the run (unless the app configures one)."""
    log = logging.getLogger("kernforge.deploy")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("kernforge.deploy: %(message)s"))
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.WARNING if quiet else logging.INFO)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = True


def print_report(report: DeployReport) -> None:
    err_console.print(f"kernforge deploy report ({escape(report.spec)}): {report.replaced} "
                      f"launch(es) ran a tuned variant, {report.fallback} the original"
                      + (f" ({report.verified} more ran the original to re-verify a tuned "
                         f"variant)" if report.verified else ""), soft_wrap=True)
    for line in report.lines():
        err_console.print(f"  {escape(line)}", soft_wrap=True)


def run(args: argparse.Namespace) -> int:
    if native_deploy_cmd.spec_is_native(args.deploy):  # any program, through the interposer
        if args.print_env:
            return native_deploy_cmd.print_env(Path(args.deploy))
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        return native_deploy_cmd.deploy(Path(args.deploy), command)
    spec = read_spec(args.deploy)  # an unusable spec is an error before the app starts
    writable_file(args.report, "--report")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    cuda = any(e.kernel.backend == "cuda" for e in spec.entries)
    hooks = cupy_hooks_if_available() if cuda else contextlib.nullcontext()
    with _deploy_log(args.quiet), hooks:
        deployment = use(spec, cupy=False,  # the hooks, if any, are installed above
                         verify="unverifiable" if args.allow_unverifiable else None)
        try:
            status = run_application(command)
        finally:
            report = deployment.stop()
    print_report(report)
    if args.report:
        write_json_atomic(Path(args.report), report.to_json())
    return status
