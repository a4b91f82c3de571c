"""A Python application's command line, and the application run in this process.

What ``kernforge run --deploy`` needs to start an application, apart from the rest of
:mod:`.run_app` (the recording): an application started through it pays for what this module
imports (docs/deploy.md, "Start-up cost"; tests/cli/test_run_lean.py guards it).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import runpy
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core import ConfigError

# the interpreter's own options accepted before the script (or -m MODULE): they are given to
# the interpreter that runs the application (kernforge record: the capture's child; kernforge
# run: a new kernforge process); -P exists from Python 3.11 on
FLAGS = "bBdEIOqRsuv" + ("P" if sys.version_info >= (3, 11) else "")
WITH_VALUE = "WX"
SUPPORTED = ("-u, -B, -O, -OO, -E, -s, -I, -b, -d, -q, -R, -v"
             + (", -P" if "P" in FLAGS else "") + ", -W ARG, -X OPT")
_WHY_NOT = {"c": "put the code in a script", "i": "the application runs to its end",
            "S": "kernforge itself is imported through site", "x": "remove the first line",
            "h": "no application to run", "V": "no application to run"}


@dataclass(frozen=True)
class PythonCommand:
    """``python [OPTIONS] app.py ARGS`` / ``app.py ARGS`` / ``python [OPTIONS] -m pkg ARGS``."""

    options: tuple[str, ...]  # the interpreter's own options, one per word (-X dev -> -Xdev)
    kind: str  # "path" | "module"
    target: str  # the script's path, or the module's name
    argv: list[str]  # the application's sys.argv (a module's: its name first)

    @property
    def program(self) -> list[str]:
        """The command without the interpreter and its options (``app.py ARGS``)."""
        return ["-m", *self.argv] if self.kind == "module" else list(self.argv)


def _unsupported(word: str, letter: str) -> ConfigError:
    why = _WHY_NOT.get(letter)
    return ConfigError(f"python option {word!r} is not supported by kernforge"
                       + (f" ({why})" if why else ""),
                       hint=f"supported before the script or -m MODULE: {SUPPORTED}")


def _need_module(name: str, options: Sequence[str]) -> None:
    """A ConfigError when ``python -m name`` would find no module: its top-level package is
    looked up as the interpreter would (the current directory first, unless ``-P``/``-I``),
    without importing anything of it."""
    top = name.partition(".")[0]
    path = list(sys.path)
    if not {"-P", "-I"} & set(options):
        path.insert(0, os.getcwd())
    saved = sys.path[:]
    sys.path[:] = path
    try:
        found = importlib.util.find_spec(top) is not None if top else False
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path[:] = saved
    if not found:
        raise ConfigError(f"python -m {name}: no module named {top!r}",
                          hint=f"check the name, the current directory ({os.getcwd()}) and "
                               f"that it is installed for {sys.executable}")


def parse_python(command: Sequence[str]) -> PythonCommand:
    """Split a Python application's command line as the interpreter does: its options (the
    supported ones, :data:`SUPPORTED`; any other is a ConfigError naming them), then the
    script or ``-m MODULE``, then the application's arguments."""
    cmd = list(command)
    if cmd and re.fullmatch(r"python[\d.]*", Path(cmd[0]).name):
        cmd = cmd[1:]
    if not cmd:
        raise ConfigError("no application command given",
                          hint="write it after --, e.g. -- python app.py ARGS")
    options: list[str] = []
    while cmd and cmd[0].startswith("-"):
        word = cmd.pop(0)
        if word == "--":
            break
        if word == "-" or word.startswith("--"):
            raise _unsupported(word, "")
        for i, letter in enumerate(word[1:], 1):
            rest = word[i + 1:]
            if letter in FLAGS:
                options.append("-" + letter)
            elif letter in WITH_VALUE or letter == "m":
                if not rest and not cmd:
                    example = {"m": "-m package.module", "W": "-W ignore app.py",
                               "X": "-X dev app.py"}[letter]
                    raise ConfigError(f"python -{letter} needs "
                                      + ("a module name" if letter == "m" else "an argument"),
                                      hint=f"e.g. -- python {example} ARGS")
                value = rest or cmd.pop(0)
                if letter == "m":
                    _need_module(value, options)
                    return PythonCommand(tuple(options), "module", value, [value, *cmd])
                options.append(f"-{letter}{value}")
                break
            else:
                raise _unsupported(word, letter)
    if not cmd:
        raise ConfigError("no application script given after the interpreter's options",
                          hint="e.g. -- python -u app.py ARGS")
    if not Path(cmd[0]).is_file():
        raise ConfigError(f"application script {cmd[0]!r} not found",
                          hint="give the path of a Python script (or python -m module)")
    return PythonCommand(tuple(options), "path", cmd[0], cmd)


def split_command(command: Sequence[str]) -> tuple[str, str, list[str]]:
    """``python app.py a b`` / ``app.py a b`` / ``python -m pkg a`` -> (kind, target, argv),
    to run in this process: the interpreter's options cannot apply here (ConfigError)."""
    py = parse_python(command)
    if py.options:
        raise ConfigError(f"the interpreter options {' '.join(py.options)} cannot apply to "
                          f"an application run in this process",
                          hint="start it in a new interpreter with them")
    return py.kind, py.target, py.argv


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
    # sys.path[0] as the interpreter sets it: the script's directory, or for -m the current
    # one; none under -P / -I (sys.flags.safe_path, Python 3.11+)
    first = os.path.dirname(os.path.abspath(target)) if kind == "path" else os.getcwd()
    with _argv(argv, None if getattr(sys.flags, "safe_path", False) else first):
        try:
            if kind == "path":
                runpy.run_path(target, run_name="__main__")
            else:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code
            if code is None or isinstance(code, int):
                return code or 0
            with contextlib.suppress(AttributeError, OSError, ValueError):  # as Python does:
                print(code, file=sys.stderr)  # sys.exit("message") prints it, exits 1
            return 1
        except Exception:  # noqa: BLE001 - the application's own failure: show it, as Python would
            import traceback  # only for an application that fails

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
        from ..backends import cupy_hooks

        try:
            hooked = cupy_hooks.install()
        except Exception as exc:  # noqa: BLE001 - a broken CuPy must not stop the run
            warnings.warn(f"kernforge: CuPy kernels will not be recorded: cannot hook CuPy "
                          f"({type(exc).__name__}: {exc})", RuntimeWarning, stacklevel=3)
    try:
        yield hooked
    finally:
        if hooked:
            cupy_hooks.uninstall()


def is_python_command(command: Sequence[str]) -> bool:
    """``python ...`` or a ``*.py`` script: run under the in-process capture as well."""
    return bool(command) and (re.fullmatch(r"python[\d.]*", Path(command[0]).name) is not None
                              or command[0].endswith(".py"))


def is_python_application(command: Sequence[str]) -> bool:
    """What kernforge can run as a Python application: a :func:`is_python_command`, the
    interpreter's options or ``-m`` first, a file whose ``#!`` line names python, or a text
    file that compiles as Python (pip's launcher for a long interpreter path starts with a
    ``/bin/sh`` line); not a binary, nor a shell script."""
    if is_python_command(command) or (bool(command) and command[0].startswith("-")):
        return True
    try:
        with open(command[0], "rb") as f:
            head = f.read(1 << 20)
    except (OSError, IndexError):
        return False
    lines = head.split(b"\n", 2)
    if lines[0].startswith(b"#!"):
        # python, or the launcher pip writes when the interpreter's path is too long for a #!
        # line: /bin/sh, then a line that re-executes the file under python
        return b"python" in lines[0] or (len(lines) > 1 and lines[1].startswith(b"'''exec'"))
    # no #! line: a Python script compiles; a binary or a shell script does not
    if b"\0" in head:
        return False
    try:
        compile(head.decode("utf-8"), command[0], "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return False
    return True
