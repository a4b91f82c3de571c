"""Run an unchanged Python application in this process, optionally under recording."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import runpy
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..core import ConfigError
from ..record import install_cupy_hooks, record, uninstall_cupy_hooks


def split_command(command: Sequence[str]) -> tuple[str, str, list[str]]:
    """``python app.py a b`` / ``app.py a b`` / ``python -m pkg a`` -> (kind, target, argv)."""
    cmd = list(command)
    if cmd and re.fullmatch(r"python[\d.]*", Path(cmd[0]).name):
        cmd = cmd[1:]
    if not cmd:
        raise ConfigError("no application command given",
                          hint="write it after --, e.g. kernforge record -- python app.py")
    if cmd[0] == "-m":
        if len(cmd) < 2:
            raise ConfigError("python -m needs a module name")
        return "module", cmd[1], cmd[1:]
    if not Path(cmd[0]).is_file():
        raise ConfigError(f"application script {cmd[0]!r} not found",
                          hint="give the path of a Python script (or python -m module)")
    return "path", cmd[0], cmd


@contextlib.contextmanager
def _argv(argv: list[str], script_dir: str | None) -> Iterator[None]:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = argv
    if script_dir is not None:
        sys.path.insert(0, script_dir)
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def run_application(command: Sequence[str]) -> int:
    """Run the application as ``__main__``; returns its exit status (SystemExit honoured)."""
    kind, target, argv = split_command(command)
    script_dir = os.path.dirname(os.path.abspath(target)) if kind == "path" else None
    with _argv(argv, script_dir):
        try:
            if kind == "path":
                runpy.run_path(target, run_name="__main__")
            else:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code
            return code if isinstance(code, int) else (0 if code is None else 1)
        except Exception:  # noqa: BLE001 - the application's own failure: show it, as Python would
            traceback.print_exc()
            return 1
    return 0


@contextlib.contextmanager
def cupy_hooks_if_available() -> Iterator[bool]:
    """Install the CuPy hooks for the block when CuPy is importable (before the application
    is imported, so that kernels it creates at import time are captured); yields whether
    they were installed here."""
    hooked = False
    if importlib.util.find_spec("cupy") is not None:
        try:
            hooked = install_cupy_hooks()
        except Exception as exc:  # noqa: BLE001 - a broken CuPy must not stop the run
            warnings.warn(f"kernforge: CuPy kernels will not be recorded: cannot hook CuPy "
                          f"({type(exc).__name__}: {exc})", RuntimeWarning, stacklevel=3)
    try:
        yield hooked
    finally:
        if hooked:
            uninstall_cupy_hooks()


def record_application(command: Sequence[str], out: str | Path, *, kernels: str | None = None,
                       max_instances: int = 4, skip: int = 0) -> tuple[int, list[Path]]:
    """Run the application with the recorder (and the CuPy hooks) installed before it is
    imported."""
    with cupy_hooks_if_available(), \
            record(out, kernels=kernels, max_instances=max_instances, skip=skip) as rec:
        status = run_application(command)
    return status, list(rec.paths)
