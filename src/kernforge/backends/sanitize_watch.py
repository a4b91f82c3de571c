"""Watch one sanitizer run as it prints: stop it at the first finding, or at its time limit.

A racy kernel on a large grid makes compute-sanitizer's racecheck report a hazard in every
block (one report per byte in hazard mode); finishing that takes minutes (the H200 red team:
``shared_race`` on 16384 blocks did not finish in 120 s, the clean kernel took 2.3 s). A single
finding is enough to reject the candidate, so :func:`watch` reads the tool's output as it comes
and, once a line matches ``finding``, keeps the rest of that report (until the output pauses
``QUIET_S`` or ``GRACE_S`` passed) and kills the tool with the process it watches.

The output goes through a pseudo-terminal where one can be opened: a program writing to a
pipe buffers its output in blocks (a few reports could sit unseen in the tool's buffer until it
exits), to a terminal line by line. Without a pseudo-terminal it is a pipe.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

QUIET_S = 0.5  # after the first finding: the report is complete once the output pauses so long
GRACE_S = 3.0  # ... or this long after the finding, whichever comes first
KEEP_LINES = 60  # lines of the first report kept (from its first line)
_MAX_BYTES = 1 << 20  # output kept before the finding (the rest is read and dropped)


@dataclass(frozen=True)
class Watched:
    """How a watched run ended: ``how`` is "exit" (``returncode`` set), "finding" (killed
    after the first report, ``first`` its lines) or "timeout" (killed at the limit)."""

    how: str
    output: str
    returncode: int | None
    seconds: float
    first: str = ""


def _channel() -> tuple[int, int]:
    """(read end, write end): a pseudo-terminal without output processing, else a pipe."""
    try:
        import pty
        import termios

        master, slave = pty.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.OPOST  # no "\n" -> "\r\n"
        attrs[3] &= ~termios.ECHO
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        return master, slave
    except (ImportError, OSError):
        return os.pipe()


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc`` and every process of its session (the tool and the program it watches,
    which holds the GPU)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def watch(cmd: Sequence[str], limit_s: float, finding: re.Pattern[str]) -> Watched:
    """Run ``cmd`` in a session of its own (stdin closed) for at most ``limit_s`` seconds,
    stopping it after the first report whose first line matches ``finding``."""
    read_end, write_end = _channel()
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=write_end,
                                stderr=write_end, start_new_session=True)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    deadline = t0 + limit_s
    kept: list[str] = []  # complete lines
    partial, size = "", 0
    found_at: float | None = None
    first: list[str] = []
    how = "exit"
    try:
        while True:
            now = time.monotonic()
            stop = deadline if found_at is None else min(deadline, found_at + GRACE_S)
            if now >= stop:
                how = "finding" if found_at is not None else "timeout"
                break
            wait = stop - now if found_at is None else min(stop - now, QUIET_S)
            ready, _, _ = select.select([read_end], [], [], wait)
            if not ready:
                if found_at is not None:  # the output paused: the first report is complete
                    how = "finding"
                    break
                continue
            try:
                chunk = os.read(read_end, 65536)
            except OSError:  # EIO: every writer of the pseudo-terminal is gone
                chunk = b""
            if not chunk:
                break
            lines = (partial + chunk.decode(errors="replace").replace("\r", "")).split("\n")
            partial = lines.pop()
            for line in lines:
                if found_at is None and finding.search(line):
                    found_at = time.monotonic()
                if found_at is not None:
                    if len(first) < KEEP_LINES:
                        first.append(line)
                elif size < _MAX_BYTES:
                    kept.append(line)
                    size += len(line) + 1
    finally:
        os.close(read_end)
    if how == "exit":  # the output ended: the tool is exiting (or closed it and goes on)
        try:
            code: int | None = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            how, code = "timeout", None
    if how != "exit":
        kill_group(proc)
        proc.wait()
        code = None
    if partial and found_at is None and size < _MAX_BYTES:
        kept.append(partial)
    output = "\n".join(kept + first)
    return Watched(how, output, code, time.monotonic() - t0, "\n".join(first))
