"""A native deployment spec deployed into an unchanged program: the driver interposer
preloaded in deploy mode, the spec's launch lines beside it.

Every command that puts a native spec into a program (``kernforge run --deploy``,
``--print-env``, the application workflow's M4) builds its environment here. The program
starts after this module has run, so it imports only what builds that environment (the spec's
checks, the line file, the library): no rich, no numpy, nothing of the tuning (docs/deploy.md,
"Start-up cost"; tests/cli/test_run_lean.py guards it).

The interposer is one C library for recording and deploying, built by
:mod:`kernforge.record.interposer`; this module is the one place ``deploy`` imports it (a
deliberate exception to the layers, named in ``pyproject.toml`` and docs/architecture.md).
"""

from __future__ import annotations

import os
import sys
import time

from . import linecache

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Sequence
    from pathlib import Path
    from typing import Any

# The launcher imports this module before the program starts (``kernforge run --deploy``):
# what only a first verification needs (the spec's model and hashes, the interposer's build,
# ``pathlib``, ``subprocess``, ``json``) is imported where it is used.


def is_native_spec(path: str | Path) -> bool:
    """Whether the spec at ``path`` is a native one (deployed through the interposer)."""
    from pathlib import Path

    from . import native as nd

    return nd.is_native_spec(Path(path))


def deploy_env(spec_path: Path, lines_path: Path, log_path: Path | None = None
               ) -> tuple[Path, dict[str, str]]:
    """The interposer library to preload (built on first use) and the variables that put it in
    deploy mode: the spec is checked (signature, image hashes), its launch lines written to
    ``lines_path``; with ``log_path``, the counts are written there when the program exits."""
    from ..record import interposer
    from . import native as nd

    spec = nd.read_spec(spec_path)
    lines_path.write_text(nd.interposer_lines(spec))
    lib = interposer.build()
    env = {"KERNFORGE_DEPLOY": str(lines_path.resolve())}
    if log_path is not None:
        env["KERNFORGE_DEPLOY_LOG"] = str(log_path.resolve())
    return lib, env


def cached(spec_path: str | os.PathLike[str]) -> tuple[str, str] | None:
    """(the interposer library, the line file) of a native spec verified before and unchanged
    since (:mod:`.linecache`), else None: nothing to hash, nothing to write."""
    return linecache.lookup(os.fspath(spec_path))


def prepared(spec_path: str | os.PathLike[str], spare: str) -> tuple[str, str]:
    """(the interposer library, the line file) of the spec: kept from an earlier start when
    nothing of it changed, else verified now (signature, image hashes: a damaged or edited
    spec is a ConfigError) and kept. ``spare``: a private folder for the line file when the
    cache folder cannot hold it."""
    hit = cached(spec_path)
    if hit is not None:
        return hit
    from pathlib import Path

    from ..record import interposer
    from . import native as nd

    spec_abs = os.path.abspath(spec_path)
    started = time.time_ns()
    spec = nd.read_spec(Path(spec_abs))
    text = nd.interposer_lines(spec)
    lib = str(interposer.build())
    images = [str(p) for e in spec.entries for p in (spec.image_path(e),
                                                     spec.image_path(e).resolve())]
    native = Path(interposer.__file__).with_name("native")
    sources = [interposer.__file__, *(str(native / n) for n in interposer.SOURCES)]
    try:
        kept = linecache.remember(spec_abs, text, lib, images, sources, str(native), started)
    except OSError:  # no usable cache folder: verified again at the next start
        kept = None
    if kept is not None:
        return lib, kept
    lines = os.path.join(spare, "deploy.tsv")  # this start's own
    with open(lines, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)
    return lib, lines


def run_deployed(spec_path: str | os.PathLike[str], command: Sequence[str]
                 ) -> tuple[int, dict[str, Any]]:
    """Run ``command`` with the interposer replacing the spec's launches: its exit status
    (128+N for signal N) and the interposer's counts (empty when no process of it reported
    any). The program starts as a child of this process, which waits for it."""
    tmp = _private_dir()
    try:
        lib, lines = prepared(spec_path, tmp)
        log = os.path.join(tmp, "log.json")
        env = dict(os.environ)
        env.pop("KERNFORGE_RECORD_DIR", None)
        env.update({"KERNFORGE_DEPLOY": os.path.abspath(lines), "KERNFORGE_DEPLOY_LOG": log,
                    # the program ends with this process (kf_parent.c): no orphan
                    "KERNFORGE_PARENT_PID": str(os.getpid()),
                    "LD_PRELOAD": ":".join(p for p in (lib, env.get("LD_PRELOAD", "")) if p)})
        status = _run(list(command), env)
        counts = _read_counts(log)
    finally:
        _remove(tmp)
    _sweep_orphans()  # after the program, off its start-up
    return status, counts


def _tmp_root() -> str:
    """The temporary folder as ``tempfile.gettempdir`` picks it, without importing it."""
    for var in ("TMPDIR", "TEMP", "TMP"):
        value = os.environ.get(var)
        if value and os.path.isdir(value):
            return os.path.abspath(value)
    for folder in ("/tmp", "/var/tmp", "/usr/tmp"):
        if os.path.isdir(folder):
            return folder
    return os.getcwd()


def _private_dir() -> str:
    """A new folder ``kf-deploy-PID-XXXXXXXX`` of this process alone (mode 0700)."""
    root = _tmp_root()
    for _ in range(100):
        path = os.path.join(root, f"kf-deploy-{os.getpid()}-{os.urandom(4).hex()}")
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    raise _config_error(f"cannot make a private folder in {root}",
                      hint="check the temporary folder (TMPDIR) and its free space")


def _config_error(message: str, hint: str) -> Exception:
    from ..core.errors import ConfigError  # only to say what went wrong

    return ConfigError(message, hint=hint)


def _remove(folder: str) -> None:
    for name in ("deploy.tsv", "log.json"):
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass
    try:
        os.rmdir(folder)
    except OSError:  # something else is in it (a part the interposer left): all of it
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def _read_counts(log: str) -> dict[str, Any]:
    """The interposer's counts, written at the program's exit ({} if it never exited cleanly)."""
    try:
        with open(log, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return {}
    try:
        counts = _parse_json(text)
    except ValueError:
        return {}
    return counts if isinstance(counts, dict) else {}


class _Strict:
    """What the C scanner behind ``json`` reads from its decoder: the defaults of
    ``json.loads``."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int
    parse_constant = {"NaN": float("nan"), "Infinity": float("inf"),
                      "-Infinity": float("-inf")}.__getitem__


def _parse_json(text: str) -> Any:
    """``json.loads(text)`` through the C scanner that ``json`` itself uses, without importing
    ``json`` (which imports ``re`` and ``enum``: a few ms of every start); ``json`` where that
    scanner is not as expected. A damaged text is a ValueError either way."""
    try:
        from _json import make_scanner

        scan = make_scanner(_Strict())  # type: ignore[arg-type]
    except (ImportError, AttributeError, TypeError):
        import json

        return json.loads(text)
    try:
        start = len(text) - len(text.lstrip(" \t\n\r"))
        value, end = scan(text, start)
    except StopIteration:
        raise ValueError("not JSON") from None
    if text[end:].strip(" \t\n\r"):
        raise ValueError("extra data after the JSON value")
    return value


def _executable(exe: str, env: dict[str, str]) -> str | None:
    """Where ``exe`` is started from: a path as it is, a name looked up on the command's PATH."""
    if os.sep in exe:
        return exe
    for folder in os.get_exec_path(env):
        path = os.path.join(folder, exe)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


# After Ctrl-C: how long the command may take to end on its own, then after SIGINT, SIGTERM
STOP_GRACE_S = (2.0, 3.0, 3.0)


def _run(command: list[str], env: dict[str, str]) -> int:
    """Start ``command`` (posix_spawn: no ``subprocess``) and wait for it: its exit status,
    128+N for signal N. Ctrl-C: the program is stopped as :func:`_stop` says, then raised."""
    try:  # the builtin behind ``signal``, loaded at start-up (``signal`` imports ``enum``)
        import _signal as signals
    except ImportError:  # pragma: no cover - another interpreter
        import signal as signals

    if not command:
        raise _config_error("no command given", hint="write it after --, e.g. "
                          "kernforge run --deploy SPEC -- ./app ARGS")
    exe = _executable(command[0], env)
    if exe is None:
        raise _config_error(f"command {command[0]!r} not found",
                          hint="give a path or a command on PATH")
    for stream in (sys.stdout, sys.stderr):  # what this process wrote comes first
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    try:
        # the signals Python ignores in itself start as a shell would start them (as
        # subprocess's restore_signals does)
        pid = os.posix_spawn(exe, command, env, setsigdef=[
            getattr(signals, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ")
            if hasattr(signals, name)])
    except OSError as exc:
        raise _config_error(f"cannot run {command[0]!r}: {exc}",
                          hint="check the path and permissions") from None
    try:
        _, status = os.waitpid(pid, 0)
    except KeyboardInterrupt:
        _stop(pid)
        raise
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _stop(pid: int) -> None:
    """End the program after Ctrl-C. The terminal sent SIGINT to it too (one process group):
    it gets time to end on its own, then SIGINT (for a signal sent to kernforge alone),
    SIGTERM, and SIGKILL. A second Ctrl-C kills it at once."""
    import signal

    try:
        for sig, grace in zip((None, signal.SIGINT, signal.SIGTERM), STOP_GRACE_S):
            if sig is not None:
                os.kill(pid, sig)
            end = time.monotonic() + grace
            while time.monotonic() < end:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    return
                time.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except ChildProcessError:
        return
    except BaseException:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
        raise


def _sweep_orphans() -> None:
    """Remove the folders of earlier runs whose launcher was killed (``kill -9`` leaves its
    ``kf-deploy-PID-*`` folder behind): those of a process that no longer exists."""
    root = _tmp_root()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) < 4 or parts[:2] != ["kf", "deploy"] or not parts[2].isdigit():
            continue
        try:
            os.kill(int(parts[2]), 0)
            continue  # alive (or not ours to signal): left alone
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue
        import shutil

        shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def env_lines(spec_path: Path) -> list[str]:
    """Shell lines that deploy the spec into any command started after them (job scripts),
    with the interposer's line file written beside the spec."""
    import shlex

    lib, extra = deploy_env(spec_path, spec_path.with_suffix(".interposer.tsv"))
    return [f"export LD_PRELOAD={shlex.quote(str(lib))}${{LD_PRELOAD:+:$LD_PRELOAD}}",
            f"export KERNFORGE_DEPLOY={shlex.quote(extra['KERNFORGE_DEPLOY'])}",
            "# optional: export KERNFORGE_DEPLOY_LOG=deploy-log.json  (counts, written at exit)"]
