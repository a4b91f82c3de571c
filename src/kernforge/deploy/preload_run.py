"""A program started under the driver interposer in deploy mode, and waited for.

``kernforge run --deploy NATIVE_SPEC`` starts the program as its child (``posix_spawn``, the
signals Python ignores reset as a shell would have them), waits for it, and reads the counts
the interposer wrote at the program's exit from a folder of its own in the temporary
directory (``kf-deploy-PID-*``, removed after; a launcher killed by ``kill -9`` leaves it,
and a later run removes the folders of launchers that no longer exist). It imports only
``os``, ``sys`` and ``time`` (the C JSON scanner reads the counts): the launcher runs it
before the program starts (docs/deploy.md, "Start-up cost").
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Callable, Sequence
    from typing import Any


def run(prepare: Callable[[str], tuple[str, str]], command: Sequence[str]
        ) -> tuple[int, dict[str, Any]]:
    """Run ``command`` with the interposer library and the line file ``prepare(folder)``
    returns (``folder``: this run's own, for a line file that has no other place): the
    program's exit status (128+N for signal N) and the interposer's counts (empty when no
    process of it reported any)."""
    tmp = _private_dir()
    try:
        lib, lines = prepare(tmp)
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
    sweep_orphans()  # after the program, off its start-up
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


def sweep_orphans() -> None:
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
