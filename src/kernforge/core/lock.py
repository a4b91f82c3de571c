"""One writer per output directory: ``tune`` and ``evolve`` hold an exclusive lock on their
``--out`` while they run, so a second process on the same directory stops at once with an
error naming the first, instead of racing it inside the study database.

The lock is ``fcntl.flock`` on ``DIR/.kernforge.lock``: the kernel releases it when the holder
exits, ``kill -9`` included, so a crashed run never leaves a stale lock behind."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from .errors import ConfigError

LOCK_NAME = ".kernforge.lock"


@contextlib.contextmanager
def directory_lock(directory: Path | str, what: str = "run directory") -> Iterator[Path]:
    """Hold the lock of ``directory`` (created when missing) for the ``with`` block; raise
    :class:`ConfigError` when another process holds it."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    lock = path / LOCK_NAME
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            raise ConfigError(f"{what} {path} is in use by another kernforge process "
                              f"(pid {holder})",
                              hint="wait for it to finish, or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the lock
