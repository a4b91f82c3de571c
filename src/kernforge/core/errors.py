"""The kernforge error hierarchy.

Every error says what was wrong *and* what to do about it: the ``hint`` is printed by the CLI
below the message. Errors that correspond to an evaluation outcome carry a :class:`Status`, so
the replay engine can turn them into typed data instead of letting them escape.
"""

from __future__ import annotations

from typing import Any

from .status import Status


class KernforgeError(Exception):
    """Base class of every error kernforge raises on purpose."""

    exit_code: int = 1
    status: Status | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message


class ConfigError(KernforgeError):
    """Bad user input: an unknown option, a malformed value, a missing file."""

    exit_code = 2
    status = Status.INVALID_CONFIG


class SpaceChangedError(ConfigError):
    """A stored study resumed with another search space than the one it was created with."""


class PluginNotFoundError(ConfigError):
    """A backend, sampler or proposer name that no plugin registered."""


class BackendUnavailableError(KernforgeError):
    """The backend exists but cannot run here (no compiler, no GPU, missing package)."""

    exit_code = 3


class SignatureError(ConfigError):
    """The kernel's entry point could not be found or its parameters not understood."""


class ArgumentError(ConfigError):
    """A kernel was called with arguments that do not match its signature."""


class CompileError(KernforgeError):
    """The compiler rejected a variant; ``log`` holds the compiler's own message."""

    status = Status.COMPILE_FAILED

    def __init__(self, message: str, *, log: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.log = log


class LaunchError(KernforgeError):
    """A compiled kernel could not be launched with the requested configuration."""

    status = Status.LAUNCH_FAILED


class KernelRuntimeError(KernforgeError):
    """A kernel crashed while running."""

    status = Status.RUNTIME_FAILED


class RecordingError(KernforgeError):
    """A recording could not be written, or a recording on disk is unusable."""

    exit_code = 4


class RecordingFormatError(RecordingError):
    """A recording on disk is corrupt, truncated, edited, or of an unknown version."""


class RecordingNotFoundError(RecordingError):
    """The recordings directory or unit the user named does not exist, or is a plain file. Bad
    input, so exit 2 as for a :class:`ConfigError` (exit 4 is for a recording that exists but
    is unusable); a RecordingError still, for the code that catches those."""

    exit_code = 2


class WrongResultError(KernforgeError):
    """A variant produced outputs that fail verification against the recording."""

    exit_code = 5
    status = Status.WRONG_RESULT


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, raised again once the interrupted work was left consistent; ``message`` says
    what was kept. The CLI prints ``interrupted: MESSAGE`` and exits 130, as for a bare
    KeyboardInterrupt (of which this is one, so any handler of those handles it)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class WorkerLost(Exception):
    """A supervised worker process died (a signal, an exit) or was killed at its time limit
    while it ran a candidate; ``status`` (RUNTIME_FAILED or TIMEOUT), ``message`` and ``cause``
    say why. The supervisor's signal to its caller, which turns it into that candidate's
    typed failure (it never reaches the user as such)."""

    def __init__(self, status: Status, message: str, cause: str) -> None:
        super().__init__(message)
        self.status, self.message, self.cause = status, message, cause


def exit_cause(returncode: int) -> str:
    """How a child process ended, for messages: "killed by SIGSEGV" or "exited with status 3"."""
    import signal

    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def error_to_json(exc: KernforgeError) -> dict[str, Any]:
    """A typed error as JSON (its class by module and name, message, hint and status), to cross
    a process boundary or be journaled; :func:`error_from_json` raises it again."""
    return {"module": type(exc).__module__, "cls": type(exc).__qualname__,
            "message": exc.message, "hint": exc.hint,
            "status": exc.status.value if exc.status else None}


def error_from_json(err: dict[str, Any]) -> KernforgeError:
    """The error :func:`error_to_json` wrote, of its class when that still imports."""
    import importlib

    cls: Any = KernforgeError
    try:
        found = getattr(importlib.import_module(err["module"]), err["cls"])
        if isinstance(found, type) and issubclass(found, KernforgeError):
            cls = found
    except (ImportError, AttributeError):
        pass
    exc = cls.__new__(cls)
    KernforgeError.__init__(exc, err["message"], hint=err["hint"])
    if err.get("status"):
        exc.status = Status(err["status"])
    return exc


def damaged_database(exc: BaseException) -> bool:
    """True when ``exc`` is SQLite saying the file is not a database or is corrupt (not busy,
    locked, full or failing to read: the file may be fine then)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in (11, 26)  # SQLITE_CORRUPT, _NOTADB
