"""``kernforge run --deploy SPEC -- python app.py ARGS``: an unchanged application, tuned kernels."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ..core.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ..deploy import DeployReport
    from ..pipeline.pyapp import PythonCommand

# Start-up cost (docs/deploy.md): an application run through this command pays for what this
# module imports before it starts, so it imports what the launch needs, when it needs it: no
# rich, no other command, nothing of the capture (tests/cli/test_run_lean.py guards it).


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run an application with a deployment spec active",
                       description="Run an unchanged Python application with a deployment "
                                   "spec (kernforge export) active: launches of kernforge."
                                   "Kernel and CuPy RawKernel/RawModule kernels that match an "
                                   "entry (kernel, device, problem) run the tuned variant, "
                                   "everything else runs unchanged. Which kernels were "
                                   "replaced, and why others were not, is logged once per "
                                   "kernel and summarized at the end (on stderr). The "
                                   "command: python [-u, -X OPT, -W ARG, ...] app.py ARGS (or "
                                   "-m MODULE); with a native spec, any program.")
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
    import logging

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


def print_report(report: DeployReport, *, deployed: bool = True) -> bool:
    """The deployment report on stderr, as it is (no markup, no wrapping), when stderr is
    still usable: an application may have closed or replaced it, and the report must not
    take its run down. ``deployed`` False: the spec's entries could not be read when its first
    kernel launched, and from then on launches were neither replaced nor counted. Returns
    whether it was written."""
    if not deployed:
        lines = [(f"kernforge deploy report ({report.spec}): not deployed (its entries could "
                  f"not be read, as said above): every launch ran the original")]
    else:
        lines = [f"kernforge deploy report ({report.spec}): {report.replaced} launch(es) ran "
                 f"a tuned variant, {report.fallback} the original"
                 + (f" ({report.verified} more ran the original to re-verify a tuned variant)"
                    if report.verified else ""),
                 *(f"  {line}" for line in report.lines())]
    stream = getattr(sys, "stderr", None)
    try:
        stream.write("".join(f"{line}\n" for line in lines))  # type: ignore[union-attr]
        stream.flush()  # type: ignore[union-attr]
    except (AttributeError, OSError, ValueError):  # None, closed, or its descriptor gone
        return False
    return True


def run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    from ..deploy import specdoc

    if specdoc.is_native_spec(Path(args.deploy)):  # any program, through the interposer
        from . import native_launch

        if args.print_env:
            return native_launch.print_env(Path(args.deploy))
        _need_command(command, "./app ARGS")
        return native_launch.deploy(args.deploy, command)  # named as given
    from ..deploy import startup
    from ..pipeline.pyapp import is_python_application, parse_python, run_application

    path = Path(args.deploy)
    # a spec that is not the one export wrote (unreadable, edited: the checksum) is an error
    # before the application starts; the entries are read when one of their kernels first
    # launches (one that does not parse is then said once, and the application runs on)
    doc = specdoc.load_document(path)
    if args.print_env:
        raise ConfigError(f"--print-env: {args.deploy} is not a native spec (it deploys "
                          f"kernforge.Kernel and CuPy kernels inside Python processes)",
                          hint=f"for a job script: export KERNFORGE_DEPLOY={args.deploy} (the "
                               f"application must import kernforge; docs/deploy.md)")
    if args.report is not None:
        from .checks import writable_file

        writable_file(args.report, "--report")
        args.report = os.path.abspath(args.report)  # where it was asked for, whatever the
        # application's working directory is when it ends
    _need_command(command, "python app.py ARGS")
    if not is_python_application(command):
        raise ConfigError(
            f"{command[0]!r} is not a Python application, and {args.deploy} is not a native "
            f"spec: it deploys kernforge.Kernel and CuPy kernels into a Python application "
            f"(a script, python app.py or python -m module), run in kernforge's process",
            hint=f"run a Python application: kernforge run --deploy {args.deploy} -- python "
                 f"app.py ARGS; a native program needs a native spec (kernforge record -o rec "
                 f"-- {command[0]} ...; kernforge tune rec --out runs/n; kernforge export "
                 f"runs/n -o spec.json; docs/recording-native.md)")
    py = parse_python(command)  # a missing script or an unsupported option: an error here
    if py.options:  # python -u app.py: they apply to a new interpreter, which runs kernforge
        _with_interpreter_options(args, py)
    hooks: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if startup.has_cuda_entries(doc):
        from ..pipeline.pyapp import cupy_hooks_if_available

        hooks = cupy_hooks_if_available()
    with _deploy_log(args.quiet), hooks:
        # deployed as $KERNFORGE_DEPLOY deploys it: the matching rules are imported and the
        # deployment made when a kernel of the spec first launches (deploy/startup.py)
        deployment = startup.install(startup.Pending(
            path, doc, cupy=False,  # the hooks, if any, are installed above
            verify="unverifiable" if args.allow_unverifiable else None, what=str(path)))
        interrupted = False
        try:
            status = run_application(command)
        except KeyboardInterrupt:  # the application's own Ctrl-C: reported, then exit 130
            interrupted = True
        finally:
            report = deployment.stop()
    print_report(report, deployed=not deployment.failed)
    if args.report:
        from ..core.jsonio import write_json_atomic

        write_json_atomic(Path(args.report), {**report.to_json(),
                                              "deployed": not deployment.failed})
    if interrupted:
        raise KeyboardInterrupt
    return status


def _need_command(command: list[str], example: str) -> None:
    if not command:
        raise ConfigError("no application command given",
                          hint=f"write it after --, e.g. kernforge run --deploy SPEC -- "
                               f"{example}")


def _with_interpreter_options(args: argparse.Namespace, py: PythonCommand) -> NoReturn:
    """``kernforge run`` again, in an interpreter started with the application's options
    (``python -X dev -m kernforge run --deploy SPEC -- app.py ARGS``), which replaces this
    process: nothing is left to do here once it ends, so its exit status (or the signal that
    ended it) and its handling of Ctrl-C are the command's, without a second process."""
    # --flag=VALUE: a value that starts with '-' (a spec named -x.json) stays a value
    flags = [*([f"--report={args.report}"] if args.report else []),
             *(["--allow-unverifiable"] if args.allow_unverifiable else []),
             *(["-q"] if args.quiet else [])]
    child = [sys.executable, *py.options, "-m", "kernforge", "run", f"--deploy={args.deploy}",
             *flags, "--", *py.program]
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    try:
        os.execv(sys.executable, child)
    except OSError as exc:
        raise ConfigError(f"cannot start {sys.executable}: {exc}",
                          hint="check that the Python interpreter is still installed") from None
