"""The ``kernforge`` command: one module per command group, errors mapped to exit codes.

Exit codes: 0 success; 1 other kernforge error; 2 bad input or configuration (a path that
does not exist, or a file given as a recordings directory); 3 backend unavailable; 4 unusable
recording (one that exists); 5 a replayed variant produced wrong results; 6 a replayed variant
failed otherwise (compile, launch, runtime, timeout); 7 a speed verdict was inconclusive
(``integrity validate``: a busy device or noisy runs; neither accepted nor rejected); 130
interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from .._version import __version__
from ..core.errors import KernforgeError

# one module per command group, in the order of ``kernforge --help``; each is imported only
# when the parser needs it: ``kernforge run`` imports run_cmd alone (LEAN), so that an
# application started through it pays no more start-up than one started with $KERNFORGE_DEPLOY
# (docs/deploy.md, "Start-up cost")
COMMAND_MODULES = ("demo_cmd", "evolve_cmd", "record_cmd", "inspect_cmd", "replay_cmd",
                   "tune_cmd", "export_cmd", "run_cmd", "serve_cmd", "integrity_cmd",
                   "stencil_cmd", "app_cmd")
LEAN = {"run": "run_cmd"}


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{__package__}.{name}")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of the one command module ``only``."""
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


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_lean(words))
    args = parser.parse_args(words)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KernforgeError as exc:
        from rich.markup import escape

        from .output import err_console

        err_console.print(f"[bold red]error:[/] {escape(exc.message)}", soft_wrap=True)
        if exc.hint:
            err_console.print(f"  [yellow]hint:[/] {escape(exc.hint)}", soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt as exc:  # an Interrupted one says what was kept
        what = getattr(exc, "message", "")
        from .output import err_console

        err_console.print(f"interrupted: {what}" if what else "interrupted", markup=False,
                          soft_wrap=True)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
