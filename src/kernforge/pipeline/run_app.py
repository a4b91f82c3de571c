"""Run an unchanged Python application in this process, optionally under recording.

Running one (``kernforge run --deploy``) imports nothing of the capture: the recording's
modules are imported by the functions that record (docs/deploy.md, "Start-up cost").
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import runpy
import sys
import traceback
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import ConfigError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from .env_prefix import EnvPrefix

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
                    raise ConfigError(f"python -{letter} needs "
                                      + ("a module name" if letter == "m" else "an argument"))
                value = rest or cmd.pop(0)
                if letter == "m":
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


def record_application(command: Sequence[str], out: str | Path, *, kernels: str | None = None,
                       max_instances: int = 4, skip: int = 0,
                       summary: Path | None = None, cupy: bool = True
                       ) -> tuple[int, list[Path]]:
    """Run the application with the recorder (and the CuPy hooks, unless ``cupy`` is False)
    installed before it is imported; ``summary``: write there what the capture saw (per
    kernel: launches and their time in the application, as the interposer's summary holds)."""
    from ..core.jsonio import write_json_atomic
    from ..record.capture import record

    with cupy_hooks_if_available() if cupy else contextlib.nullcontext(), \
            record(out, kernels=kernels, max_instances=max_instances, skip=skip) as rec:
        try:
            status = run_application(command)
        finally:
            if summary is not None and rec.seen:
                summary.parent.mkdir(parents=True, exist_ok=True)
                write_json_atomic(summary, {"pid": os.getpid(), **rec.summary()})
    return status, list(rec.paths)


def is_python_command(command: Sequence[str]) -> bool:
    """``python ...`` or a ``*.py`` script: run under the in-process capture as well."""
    return bool(command) and (re.fullmatch(r"python[\d.]*", Path(command[0]).name) is not None
                              or command[0].endswith(".py"))


def env_command(command: Sequence[str]) -> tuple[EnvPrefix | None, list[str]]:
    """``env [-i] [-u NAME]... [NAME=VALUE]... COMMAND`` -> (env's prefix, COMMAND), for
    ``kernforge record`` to run COMMAND with env's environment applied by kernforge, the
    interposer's added to it (and a Python COMMAND under the in-process capture too); env
    before env is read the same way (``env A=1 env -i ./app``: both applied). (None, the
    command as it stands) for a command that does not start with env, and for env with
    another option (-C DIR, -S STRING, ...: env runs as given). ConfigError: env without a
    command; env's other options before a Python command (kernforge would not apply them),
    or before any command together with a change that would remove the interposer's
    environment (-i, -u LD_PRELOAD, KERNFORGE_*: env would make it itself)."""
    from .env_prefix import SUPPORTED as ENV_SUPPORTED
    from .env_prefix import split_env

    prefix, rest = split_env(command)
    if prefix is None:
        return None, list(command)
    if not rest and not prefix.unknown:
        raise ConfigError(f"{command[0]} is given no command to run (env alone prints the "
                          f"environment, the interposer's included): there is nothing to "
                          f"record", hint="name the application after env's variables: "
                          "kernforge record -o DIR -- env NAME=VALUE... ./app ARGS")
    if prefix.unsupported is None:
        inner, app = env_command(rest)
        return (prefix if inner is None else prefix.then(inner)), app
    # env runs as given (and so does an env it runs): what it runs must not need kernforge
    # to apply env's changes
    word = prefix.unsupported
    inner, app = (None, rest) if prefix.unknown else env_command(rest)
    if (any(is_python_command([w]) for w in rest) if prefix.unknown
            else is_python_command(app)):
        raise ConfigError(f"env option {word!r} is not supported before a Python "
                          f"application", hint=f"supported: {ENV_SUPPORTED}; or "
                          "set the environment first and run: kernforge record -o DIR "
                          "-- python app.py ARGS")
    removes = prefix.removes_interposer() or (inner and inner.removes_interposer())
    if removes:
        raise ConfigError(f"env {removes} would remove the interposer's environment "
                          f"(LD_PRELOAD, KERNFORGE_*), so nothing would be recorded: with the "
                          f"option {word!r}, which kernforge does not apply, env runs as "
                          f"given and makes its changes itself, after kernforge set that "
                          f"environment", hint=f"leave out {word}"
                          + (" (cd DIR first)" if word.startswith(("-C", "--c")) else "")
                          + f", and kernforge applies env's {ENV_SUPPORTED} itself before "
                          "it adds the interposer's")
    return None, list(command)


def command_program(command: Sequence[str]) -> str:
    """The program ``command`` runs: env's command after its options and assignments (env
    before env too), where that is known; else the command's first word."""
    from .env_prefix import split_env

    prefix, rest = split_env(command)
    if prefix is None or prefix.unknown or not rest:
        return command[0] if command else ""
    return command_program(rest)


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


def runs_in_process(command: Sequence[str]) -> bool:
    """Whether :func:`record_command` runs ``command`` under the in-process capture as well as
    the interposer: ``python ...``, a ``*.py`` script, or either after ``env``'s variables.
    Any other command (a binary, a shell script) is recorded at the driver level only, the
    Python applications it starts included."""
    return is_python_command(env_command(command)[1])


def record_command(command: Sequence[str], out: str | Path, *, kernels: str | None = None,
                   max_instances: int = 4, skip: int = 0, max_mb: int = 16384,
                   record_all: bool = False, sequence: int | None = None
                   ) -> tuple[int, list[Path], list[str], list[dict]]:
    """Run any command with the driver interposer preloaded (env's environment applied by
    kernforge: :func:`env_command`; Python applications, also after env's variables, under
    the in-process capture too: :func:`runs_in_process`), then
    turn what it recorded into units. Returns the exit status,
    the new units (of both captures), problems with spool units, and the interposer's
    per-process counts of this command (not those an earlier recording into ``out`` left)."""
    from ..record import interposer
    from ..record.native_format import (
        drop_spent_counts,
        finalize_spool,
        spool_entries,
        spool_summaries,
    )

    cmd = list(command)
    if not cmd:
        raise ConfigError("no application command given",
                          hint="write it after --, e.g. kernforge record -o DIR -- ./app ARGS")
    prefix, cmd = env_command(cmd)  # env -i FOO=1 ./app: kernforge applies env's part
    base = prefix.apply(os.environ) if prefix is not None else dict(os.environ)
    Path(out).mkdir(parents=True, exist_ok=True)
    env = interposer.environment(out, kernels=kernels, max_instances=max_instances, skip=skip,
                                 max_mb=max_mb, record_all=record_all, base=base,
                                 sequence=sequence)
    lib = interposer.build()
    if is_python_command(cmd):
        py = parse_python(cmd)  # a missing script is a clear error before anything runs
        cmd = interposer.python_child(py.program)
        cmd[1:1] = py.options  # python -u app.py: the capture's interpreter gets -u
    before, earlier = set(Path(out).rglob("manifest.json")), spool_entries(out)
    counted = {json.dumps(s, sort_keys=True) for s in spool_summaries(out)}  # earlier runs'
    status = interposer.run_preloaded(cmd, interposer.preload_env(lib, env, base=base))
    _, problems = finalize_spool(out)
    new = sorted(p.parent for p in set(Path(out).rglob("manifest.json")) - before)
    summaries = [s for s in spool_summaries(out) if json.dumps(s, sort_keys=True) not in counted]
    drop_spent_counts(out, earlier)  # this run's counts, read: no .spool left behind
    return status, new, problems, summaries


def pyrun_main(argv: Sequence[str]) -> int:
    """``python -m kernforge.pipeline.pyrun APP ARGS``: the in-process capture of a Python
    application, configured by the interposer's environment."""
    from ..record import interposer
    from ..record.native_format import SPOOL

    out = os.environ.get("KERNFORGE_RECORD_DIR")
    if not out:
        print("kernforge: pyrun needs KERNFORGE_RECORD_DIR", file=sys.stderr)
        return 2
    try:  # the interposer's own values, read as strictly as it reads them
        n = interposer.env_int(os.environ, "KERNFORGE_MAX_INSTANCES", 4, -1, (1 << 63) - 1)
        skip = interposer.env_int(os.environ, "KERNFORGE_SKIP", 0, 0, (1 << 63) - 1)
        seq = interposer.env_int(os.environ, "KERNFORGE_SEQUENCE", 0, 0,
                                 interposer.SEQUENCE_LIMIT)
    except ConfigError as exc:
        print(f"kernforge: {exc}", file=sys.stderr)
        return 2
    status, _ = record_application(list(argv), out, kernels=os.environ.get("KERNFORGE_KERNELS"),
                                   max_instances=n if n >= 0 else None,  # type: ignore[arg-type]
                                   skip=skip,
                                   summary=Path(out) / SPOOL / f"inprocess-{os.getpid()}.json",
                                   # sequences are the interposer's: CuPy's RawKernel and
                                   # RawModule launches reach it (their NVRTC source too)
                                   cupy=seq < 2)
    return status


def spooled(out: str | Path) -> set[str]:
    """What the interposer's spool under ``out`` holds before a recording into it (an earlier
    run's counts), for :func:`keep_interrupted`."""
    from ..record.native_format import spool_entries

    return spool_entries(out)


def keep_interrupted(out: str | Path, earlier: set[str]) -> tuple[list[str], Path]:
    """After a recording into ``out`` was interrupted: its complete spool units turned into
    units, its counts dropped (``earlier``'s kept). Returns the spool units that could not be
    turned into units, and the spool that keeps them."""
    from ..record.native_format import SPOOL, finalize_interrupted

    return finalize_interrupted(out, earlier), Path(out) / SPOOL
