"""The worker side of fault isolation: a crash log, a watchdog that kills a hung native call,
and the events that tell the scheduler's monitor what runs where.

- **Crash log.** Every worker process enables :mod:`faulthandler` on a file named after its
  nanny (stable across restarts). A fatal signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL)
  writes ``Fatal Python error: <what>`` and the stacks there before the process dies with that
  signal; the nanny then starts a new worker, which sends its predecessor's log to the monitor.
- **Watchdog.** ``faulthandler.dump_traceback_later(timeout, exit=True)`` runs in a C thread
  that needs no GIL: when a stage overruns it writes ``Timeout (h:mm:ss)!`` and the stacks to the
  crash log and ``_exit(1)``s the process -- a kernel spinning in native code cannot block it.
  Each stage (compile, run) is armed with its own limit.
- **Events.** :meth:`Guard.__enter__` announces the request -- a batch of ``size``
  evaluations, run one after the other -- to the scheduler *synchronously*
  (``Client.log_event``), before any candidate code runs; stage changes and each evaluation's
  end go batched. Every stage names the evaluation of the batch it belongs to (``item``), in
  the event and on the crash log's first line, so a death is charged to that one evaluation.
"""

from __future__ import annotations

import faulthandler
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from ..core import Measurement
from .monitor import DEATH, DEPOSIT, END, STAGE, STAGE_MARK, START

#: exit status of a worker that ends itself after depositing its result (device unusable)
POISONED_EXIT = 70
_log_lock = threading.Lock()
_log: TextIO | None = None


def crash_dir() -> Path:
    root = os.environ.get("KERNFORGE_CRASH_DIR")
    user = os.getuid() if hasattr(os, "getuid") else 0
    path = Path(root) if root else Path(tempfile.gettempdir()) / f"kernforge-service-{user}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def crash_log_path(identity: str) -> Path:
    """The crash log of the worker process(es) supervised by ``identity`` (a nanny address)."""
    return crash_dir() / (re.sub(r"[^A-Za-z0-9.-]+", "_", identity).strip("_") + ".crash")


def install_crash_log(worker: Any) -> str:
    """Report the predecessor's crash log (if any) and route fatal signals into a fresh one.
    Returns what the predecessor left ('' when it left nothing)."""
    global _log
    identity = worker.nanny or worker.address
    path = crash_log_path(identity)
    with _log_lock:
        if _log is not None:  # set up already in this process (plugin registered again)
            return ""
        left = path.read_text(errors="replace") if path.exists() else ""
        _log = open(path, "w")  # noqa: SIM115 - kept open for the life of the process
        faulthandler.enable(file=_log, all_threads=True)
    if left.strip() and worker.nanny:
        worker.log_event(DEATH, {"nanny": worker.nanny, "text": left[:20_000]})
    return left


def remove_crash_log() -> None:
    """A worker closing normally leaves no crash log behind."""
    global _log
    with _log_lock:
        if _log is None:
            return
        faulthandler.disable()
        _log.close()
        Path(_log.name).unlink(missing_ok=True)
        _log = None


def _crash_file() -> TextIO:
    global _log
    with _log_lock:
        if _log is None:  # a task on a worker that never ran the plugin
            _log = open(crash_log_path(f"pid-{os.getpid()}"), "w")  # noqa: SIM115
            faulthandler.enable(file=_log, all_threads=True)
        return _log


class Guard:
    """One request on one worker: announced, watched stage by stage, and ended."""

    def __init__(self, worker: Any, key: str, what: str, size: int = 1) -> None:
        self.worker, self.key, self.what, self.size = worker, key, what, size
        self.stage_name = "start"
        self.item = 0  # the evaluation of the batch now running
        self.announce_s = 0.0  # the synchronous announcement's round trip

    def _msg(self, **kw: Any) -> dict[str, Any]:
        return {"key": self.key, "worker": self.worker.address, **kw}

    def __enter__(self) -> Guard:  # noqa: PYI034
        _crash_file()
        from distributed import get_client
        t0 = time.perf_counter()
        get_client().log_event(START, self._msg(
            nanny=self.worker.nanny, what=self.what, pid=os.getpid(), stage="start",
            timeout_s=0.0, t_start=time.time(), size=self.size, item=0))
        self.announce_s = time.perf_counter() - t0
        return self

    def stage(self, name: str, timeout_s: float) -> None:
        """Arm the watchdog for the next stage (a new limit replaces the previous one). The
        stage and the item are also the first line of the crash log, so a crash names them
        even when the (batched) stage event never left the process."""
        self.stage_name = name
        log = _crash_file()
        _rewind(log, f"{STAGE_MARK} {name} {float(timeout_s)!r} {self.item}\n")
        self.worker.log_event(STAGE, self._msg(stage=name, timeout_s=float(timeout_s),
                                               item=self.item))
        faulthandler.dump_traceback_later(float(timeout_s), exit=True, file=log)

    def end(self, m: Measurement, *, count: bool = True, last: bool = True) -> None:
        """Disarm the watchdog and report the outcome of the current item (``count``: it is
        an evaluation; ``last``: the request is over, the monitor forgets it; otherwise the
        next item starts, and the crash log names it)."""
        faulthandler.cancel_dump_traceback_later()
        self.worker.log_event(END, self._msg(status=m.status.value, stages=dict(m.stages),
                                             count=count, item=self.item, last=last))
        if not last:
            self.item += 1
            self.stage_name = "start"
        _rewind(_crash_file(), "" if last else f"{STAGE_MARK} start 0.0 {self.item}\n")

    def deposit_and_exit(self, m: Measurement) -> None:
        """Hand the result of the current item to the monitor, then end this process (its
        device is unusable): the nanny restarts it and that item resolves to ``m``."""
        faulthandler.cancel_dump_traceback_later()
        _rewind(_crash_file())
        from distributed import get_client
        try:
            get_client().log_event(DEPOSIT, self._msg(measurement=m.to_json(), item=self.item))
        finally:
            os._exit(POISONED_EXIT)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        faulthandler.cancel_dump_traceback_later()
        _rewind(_crash_file())


def _rewind(log: TextIO, text: str = "") -> None:
    """Empty the crash log (and start it with ``text``); faulthandler appends after it."""
    with _log_lock:
        log.seek(0)
        log.truncate()
        if text:
            log.write(text)
        log.flush()
