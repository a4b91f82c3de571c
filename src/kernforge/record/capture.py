"""Capture: record kernel launches while an application runs.

>>> with record("recordings", kernels="heat_*", max_instances=2) as rec:
...     run_application()
>>> rec.paths
[PosixPath('recordings/heat_step-0'), PosixPath('recordings/heat_step-1')]

The :class:`Recorder` is a launch observer: it receives one
:class:`~kernforge.backends.events.LaunchEvent` per launch from any capture source
(:class:`kernforge.Kernel`, the CuPy hooks, later a driver interposer), snapshots every array
argument before the launch (the prologue) and after it (the epilogue) through the event's
backend (``to_host``), then writes one replay unit per launch with
:func:`kernforge.record.format.write_recording`. The application's arrays are only read.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np

from ..backends import Backend, LaunchEvent, add_observer, cupy_hooks, remove_observer
from ..core import ConfigError, Param
from . import interposer
from .format import PathLike, write_recording


@dataclass
class _Token:
    event: LaunchEvent
    prologue: dict[str, np.ndarray]


@dataclass
class _Timed:
    """A launch the recorder leaves alone: timed (launch and synchronize) for the summary."""

    name: str
    t0: float
    timed: bool = True  # False: the first call, which compiles (neither recorded nor timed)

APP_SAMPLES = 5  # per kernel, as the interposer keeps (record/native/kf.h KF_APP_TIMED)


def install_cupy_hooks() -> bool:
    """Hook ``cupy.RawKernel``/``cupy.RawModule`` now (imports CuPy), so that kernels an
    application creates at import time, before ``with record(...)``, are captured too.
    Returns False when they were already installed. Undo with :func:`uninstall_cupy_hooks`."""
    return cupy_hooks.install()


def uninstall_cupy_hooks() -> bool:
    """Restore CuPy's own classes; False when the hooks were not installed."""
    return cupy_hooks.uninstall()


class Recorder:
    """The launch observer behind :func:`record`; ``paths`` lists the units written so far.

    ``seen`` counts the matching calls per kernel name, ``unmatched`` the others (``kernels``
    leaves them out), ``recorded`` the units written;
    ``timed`` the seconds of the launches left unrecorded (the first call of a kernel, which
    compiles it, excluded): :meth:`summary` is the in-application time of each kernel.
    """

    def __init__(self, root: PathLike, *, kernels: str | None = None,
                 max_instances: int | None = 4, skip: int = 0) -> None:
        if max_instances is not None and max_instances < 1:
            raise ConfigError(f"max_instances={max_instances} must be >= 1: "
                              f"{max_instances} launches per kernel would record nothing",
                              hint="give the number of launches to record per kernel "
                                   "(None: all of them)")
        if skip < 0:
            raise ConfigError(f"skip={skip} must be >= 0",
                              hint="give the number of launches to skip per kernel")
        self.root = Path(root)
        self.kernels = kernels
        self.max_instances = max_instances
        self.skip = skip
        self.paths: list[Path] = []
        self.seen: dict[str, int] = {}
        self.unmatched: dict[str, int] = {}  # launches of kernels the pattern leaves out
        self.recorded: dict[str, int] = {}
        self._reserved: dict[str, int] = {}
        self.timed: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def matches(self, name: str) -> bool:
        return self.kernels is None or fnmatchcase(name, self.kernels)

    def _reserve(self, name: str) -> bool | None:
        """Count the call; True when it is one to record (a slot is then reserved), False
        when it is one to time, None for the first call (it compiles: neither)."""
        with self._lock:
            call = self.seen.get(name, 0)
            self.seen[name] = call + 1
            taken = self._reserved.get(name, 0)
            if call < self.skip or (self.max_instances is not None
                                    and taken >= self.max_instances):
                return None if call == 0 else False
            self._reserved[name] = taken + 1
            return True

    def _release(self, name: str) -> None:
        with self._lock:
            self._reserved[name] -= 1

    @staticmethod
    def _snapshot(backend: Backend, pairs: Sequence[tuple[Param, Any]]) -> dict[str, np.ndarray]:
        """Host copies of every array argument; never a view of the application's memory."""
        out: dict[str, np.ndarray] = {}
        for p, a in pairs:
            if p.pointer:
                h = np.asarray(backend.to_host(a))
                if isinstance(a, np.ndarray) and np.may_share_memory(h, a):
                    h = h.copy()
                out[p.name] = h
        return out

    def before(self, event: LaunchEvent) -> _Token | _Timed | None:
        if not self.matches(event.name):
            with self._lock:
                self.unmatched[event.name] = self.unmatched.get(event.name, 0) + 1
            return None
        sig, args = event.signature, event.args
        if len(args) != len(sig) or any(p.pointer and not event.backend.is_buffer(a)
                                        for p, a in zip(sig, args)):
            return None  # the launch itself will raise ArgumentError
        reserved = self._reserve(event.name)
        if not reserved:
            # a kernel these hooks record is theirs in every launch: the interposer must not
            # record the launches past max_instances as native units of the same name
            interposer.suppress(True)
            return _Timed(event.name, time.perf_counter(), timed=reserved is not None)
        try:
            prologue = self._snapshot(event.backend, event.pairs)
        except BaseException:
            self._release(event.name)
            raise
        interposer.suppress(True)  # recorded here, with its source: not by the interposer too
        return _Token(event, prologue)

    def after(self, token: _Token | _Timed | None, error: BaseException | None) -> None:
        if token is None:
            return
        if isinstance(token, _Timed):
            interposer.suppress(False)
            if error is None and token.timed:
                dt = time.perf_counter() - token.t0
                with self._lock:
                    self.timed.setdefault(token.name, []).append(dt)
            return
        interposer.suppress(False)
        event = token.event
        if error is not None:
            self._release(event.name)  # a failed launch does not use up an instance
            return
        try:
            epilogue = self._snapshot(event.backend, event.pairs)
            path = write_recording(
                self.root, backend=event.backend, variant=event.variant, args=event.pairs,
                prologue=token.prologue, epilogue=epilogue,
                policies={p.name: event.policy(p.name) for p in event.signature if p.pointer},
                capture=event.capture)
        except BaseException:
            self._release(event.name)
            raise
        with self._lock:
            self.paths.append(path)
            self.recorded[event.name] = self.recorded.get(event.name, 0) + 1

    def summary(self) -> dict[str, object]:
        """What the in-process capture saw, in the shape of the interposer's
        ``summary-<pid>.json``: per kernel ``seen``, ``recorded``, ``app_ms`` (the first
        timed launches, milliseconds), ``app_ms_total`` and ``timed`` (all timed launches)."""
        with self._lock:
            kernels = [{"name": n, "seen": k, "recorded": self.recorded.get(n, 0),
                        "app_ms": [t * 1e3 for t in self.timed.get(n, [])[:APP_SAMPLES]],
                        "app_ms_total": sum(self.timed.get(n, [])) * 1e3,
                        "timed": len(self.timed.get(n, []))} for n, k in self.seen.items()]
            return {"origin": "in-process", "launches": sum(self.seen.values()),
                    "recorded": len(self.paths), "kernels": kernels,
                    "unmatched": sorted(self.unmatched)}

    @property
    def count(self) -> int:
        """Units written so far."""
        with self._lock:
            return len(self.paths)


@contextlib.contextmanager
def record(root: PathLike, *, kernels: str | None = None, max_instances: int | None = 4,
           skip: int = 0) -> Iterator[Recorder]:
    """Record the kernel launches made inside the ``with`` block.

    Captured: every :class:`kernforge.Kernel` call, and, when CuPy is already imported, the
    kernels of ``cupy.RawKernel``/``cupy.RawModule`` created while the hooks are installed
    (they are installed on entry and removed on exit unless they already were; see
    :func:`install_cupy_hooks`). ``kernels``: an fnmatch pattern on the entry name (None =
    all). Per kernel name, the first ``skip`` calls are passed over, then at most
    ``max_instances`` are recorded (None = all).
    """
    recorder = Recorder(root, kernels=kernels, max_instances=max_instances, skip=skip)
    hooked = "cupy" in sys.modules and install_cupy_hooks()
    add_observer(recorder)
    try:
        yield recorder
    finally:
        remove_observer(recorder)
        if hooked:
            uninstall_cupy_hooks()
