"""The ``kernforge`` command: one module per command group, errors mapped to exit codes.

Exit codes: 0 success; 1 other kernforge error; 2 bad input or configuration (a path that
does not exist, or a file given as a recordings directory); 3 backend unavailable; 4 unusable
recording (one that exists); 5 a replayed variant produced wrong results; 6 a replayed variant
failed otherwise (compile, launch, runtime, timeout); 7 finished, but damaged units were skipped
(each named with its reason; the healthy units' results are reported); 8 the application
``kernforge record`` ran failed (its own status printed; ``--pass-status`` exits with it);
9 a speed verdict was inconclusive (``integrity validate``: a busy device or noisy runs;
neither accepted nor rejected); 130 interrupted.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only
    import argparse
    from collections.abc import Callable, Sequence
    from types import ModuleType

# one module per command group, in the order of ``kernforge --help``; each is imported only
# when the parser needs it: ``kernforge run`` imports run_cmd alone (LEAN), so that an
# application started through it pays no more start-up than one started with $KERNFORGE_DEPLOY
# (docs/deploy.md, "Start-up cost"); what else a command needs is imported when it runs, and
# ``run --deploy`` of a native spec verified before takes no parser at all (native_launch.quick)
COMMAND_MODULES = ("demo_cmd", "evolve_cmd", "record_cmd", "inspect_cmd", "replay_cmd",
                   "tune_cmd", "export_cmd", "run_cmd", "serve_cmd", "integrity_cmd",
                   "stencil_cmd", "app_cmd")
LEAN = {"run": "run_cmd"}


def _module(name: str) -> ModuleType:
    import importlib

    return importlib.import_module(f"{__package__}.{name}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of the one command module ``only``."""
    import argparse

    from .._version import __version__

    parser = argparse.ArgumentParser(
        prog="kernforge",
        description="Record the kernels of a real run, replay them in isolation, verify and "
                    "time every variant.")
    parser.add_argument("--version", action="version", version=f"kernforge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in (only,) if only else COMMAND_MODULES:
        _module(name).register(sub)
    return parser


def _lean(argv: Sequence[str]) -> str | None:
    """The command module of a LEAN command given first (``run ...``), else None."""
    return LEAN.get(argv[0]) if argv else None


def encoding_safe() -> None:
    """Output the terminal's encoding cannot show (a non-ASCII path under
    ``PYTHONIOENCODING=ascii``, a C locale) is written escaped (``\\xe9``), never a
    UnicodeEncodeError: as Python already does on stderr, on stdout too."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", "") == "strict":
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a detached or closed stream: leave it
                pass


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    quick = _quick(words)
    args = None
    if quick is None:
        lean = _lean(words)
        if lean is None:  # `kernforge run` leaves the application's own streams as they are
            encoding_safe()
        parser = build_parser(lean)
        parsed = args = parser.parse_args(words)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        quick = lambda: _run_parsed(parsed)
    try:
        return quick()
    except KeyboardInterrupt as exc:  # an Interrupted one says what was kept
        what = getattr(exc, "message", "")
        from .output import err_console

        err_console.print(f"interrupted: {what}" if what else "interrupted", markup=False,
                          soft_wrap=True)
        again = None if args is None else resume_command(words, args)
        if again:
            err_console.print(f"  finished work is kept; to go on: {again}", markup=False,
                              soft_wrap=True)
        return 130
    except Exception as exc:
        from ..core.errors import KernforgeError  # what kernforge raises on purpose

        if not isinstance(exc, KernforgeError):
            raise
        from rich.markup import escape

        from .output import err_console

        err_console.print(f"[bold red]error:[/] {escape(exc.message)}", soft_wrap=True)
        if exc.hint:
            err_console.print(f"  [yellow]hint:[/] {escape(exc.hint)}", soft_wrap=True)
        return exc.exit_code


def _run_parsed(args: argparse.Namespace) -> int:
    from . import damaged

    damaged.reset()
    return damaged.final_status(int(args.func(args) or 0))


def _quick(words: Sequence[str]) -> Callable[[], int] | None:
    """``run --deploy`` of a native spec verified before: its launch, without a parser."""
    if words[:1] != ["run"]:
        return None
    from .native_launch import quick

    return quick(words[1:])


def resume_command(argv: list[str], args: argparse.Namespace) -> str | None:
    """The command line that continues an interrupted resumable command (its run directory
    named, ``--resume`` added), or None for one that cannot resume."""
    if not hasattr(args, "resume"):
        return None
    where = [(flag, getattr(args, attr, None)) for flag, attr in (("--out", "out"),
                                                                   ("--json", "json"))]
    if not any(value for _, value in where):
        return None  # nothing was written that --resume could go on with
    line = [a for a in argv if a != "--resume"]
    for flag, value in where:
        if value and flag not in line and not any(a.startswith(flag + "=") for a in line):
            line += [flag, str(value)]
    import shlex

    return shlex.join(["kernforge", *line, "--resume"])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
