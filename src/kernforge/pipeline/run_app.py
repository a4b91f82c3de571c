"""Run an unchanged Python application under recording: in this process (the in-process
capture) or as any command with the driver interposer preloaded.

The application's command line and running it without recording are :mod:`.pyapp`'s (its
names are this module's too); the recording's modules are imported by the functions that
record.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import ConfigError
from .pyapp import (  # noqa: F401 - names of this module too (kernforge record, the demo)
    FLAGS,
    SUPPORTED,
    WITH_VALUE,
    PythonCommand,
    cupy_hooks_if_available,
    is_python_application,
    is_python_command,
    parse_python,
    run_application,
    split_command,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from .env_prefix import EnvPrefix

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
            if summary is not None and (rec.seen or rec.unmatched):
                summary.parent.mkdir(parents=True, exist_ok=True)
                write_json_atomic(summary, {"pid": os.getpid(), **rec.summary()})
    return status, list(rec.paths)


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
    the new units (of both captures), problems with spool units, and the per-process counts
    of this command (not those an earlier recording into ``out`` left): the interposer's,
    then the in-process capture's (``"origin": "in-process"``)."""
    from ..record import interposer
    from ..record.native_format import (
        drop_spent_counts,
        finalize_spool,
        inprocess_summaries,
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
    summaries += inprocess_summaries(out, earlier)
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
