"""Progress that a log file can show: when output is not a terminal (CI, batch jobs, pipes),
spinners and live tables print nothing, so long work is reported as plain lines instead, one
per step and, while a step runs, the latest status at least every ``every`` seconds (a
background thread, so a step that never calls back still shows it is alive)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from rich.console import Console

HEARTBEAT_S = 30.0


class LineProgress:
    """``step(msg)``: a line now; ``update(msg)``: the status the next periodic line shows."""

    def __init__(self, console: Console, every: float = HEARTBEAT_S,
                 enabled: bool | None = None) -> None:
        """``enabled``: print at all (default: only when ``console`` is not a terminal, where
        a live display shows the same)."""
        self.console, self.every = console, every
        self.enabled = not console.is_terminal if enabled is None else enabled
        self.t0 = time.monotonic()
        self._status = ""
        self._last = self.t0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="kernforge-progress",
                                        daemon=True)

    def _print(self, msg: str) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        with self._lock:
            self._last = now
            self.console.print(f"[{now - self.t0:7.1f} s] {msg}", markup=False,
                               highlight=False, soft_wrap=True)

    def step(self, msg: str) -> None:
        self._status = msg
        self._print(msg)

    def update(self, msg: str) -> None:
        self._status = msg

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.every / 4)):
            if time.monotonic() - self._last >= self.every:
                self._print(f"... {self._status or 'working'}")

    def start(self) -> LineProgress:
        if self.enabled:
            self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


@contextlib.contextmanager
def line_progress(console: Console, every: float = HEARTBEAT_S,
                  enabled: bool | None = None) -> Iterator[LineProgress]:
    """A :class:`LineProgress` for the ``with`` block (its heartbeat thread stopped after)."""
    lp = LineProgress(console, every, enabled).start()
    try:
        yield lp
    finally:
        lp.close()

