"""Was the device busy *while* a measurement ran? (the idle check samples only before it).

:func:`watch` returns a :class:`Watch`; its :meth:`Watch.result` is an
:class:`~.provenance.IdleCheck` over the window since :func:`watch` was called.

- cpu: the share of all cores' time that other processes used in the window: the non-idle
  time of ``/proc/stat`` minus this process's own CPU time (every thread of it: the OpenMP
  kernel, the flush; and the children it waited for: the compiler). Busy above 25% (the idle check's threshold), i.e. another process kept
  half a core of two busy. A window under ``MIN_WINDOW_S`` is unknown (idle None): the check
  before the measurement stands (:func:`combine`).
- other backends: the backend's idle probe once more, after the measurement (a GPU's
  utilisation counts the measurement's own kernels, so nothing is read during it);
  :func:`watch_probe` takes the probe itself (a native unit's GPU, by its PCI bus id).

:func:`watch_cpu` watches the host's cores without a backend (an application's rounds: its
processes are children this process waits for, so their CPU time is its own).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..backends import Backend
from .provenance import BUSY_FRACTION, IdleCheck, idle_check

# /proc/stat counts each core's time in ticks of 10 ms: a shorter window holds a tick or two,
# and says nothing about the load (the idle check before the measurement samples 0.2 s)
MIN_WINDOW_S = 0.1


def _proc_stat() -> tuple[float, float] | None:
    """(total, idle) seconds of all cores since boot; None where /proc/stat is unreadable."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        tick = float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) / tick, idle / tick


def _own_cpu() -> float:
    """This process's CPU time, with that of the children it waited for (a compiler run
    inside the window is its own work, not another process's load)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class Watch:
    """A measurement window opened by :func:`watch`, :func:`watch_cpu` or :func:`watch_probe`."""

    probe: Callable[[], IdleCheck] | None  # read after the window; None: the CPU's /proc/stat
    start: tuple[float, float] | None
    own: float
    wall: float

    def result(self) -> IdleCheck:
        if self.probe is not None:
            check = self.probe()
            return IdleCheck(check.idle, check.utilisation, f"{check.method}, after the "
                             f"measurement", check.note)
        if self.start is None:
            return IdleCheck(None, None, "skipped", "/proc/stat unreadable")
        end = _proc_stat()
        if end is None:
            return IdleCheck(None, None, "skipped", "/proc/stat unreadable")
        wall = time.monotonic() - self.wall
        if wall < MIN_WINDOW_S:  # a tick or two: one of another process's would read 50 %
            return IdleCheck(None, None, f"/proc/stat during the measurement ({wall:.3f} s)",
                             "too short for /proc/stat's ticks to tell; the check before it "
                             "stands")
        total = end[0] - self.start[0]
        busy = total - (end[1] - self.start[1])
        others = max(0.0, busy - (_own_cpu() - self.own))
        share = others / total if total > 0 else 0.0
        return IdleCheck(share <= BUSY_FRACTION, share,
                         f"/proc/stat during the measurement ({time.monotonic() - self.wall:.1f}"
                         f" s), this process's CPU time left out")


def watch_cpu() -> Watch:
    """Start watching the host's cores (other processes' share of them)."""
    return Watch(None, _proc_stat(), _own_cpu(), time.monotonic())


def watch_probe(probe: Callable[[], IdleCheck]) -> Watch:
    """Start a window whose result is ``probe`` read after it."""
    return Watch(probe, None, _own_cpu(), time.monotonic())


def watch(backend: Backend) -> Watch:
    """Start watching (see the module docstring)."""
    if backend.name == "cpu":
        return watch_cpu()
    return watch_probe(lambda: idle_check(backend))


def combine(before: IdleCheck | None, during: IdleCheck | None) -> IdleCheck | None:
    """One check from the one before and the one during: busy if either was; idle if either
    was and neither busy; unknown otherwise."""
    checks = [c for c in (before, during) if c is not None]
    busy = [c for c in checks if c.idle is False]
    if busy:
        return max(busy, key=lambda c: c.utilisation or 0.0)
    known = [c for c in checks if c.idle is True]
    if known:
        return known[-1]
    return checks[-1] if checks else None
