"""Where an M3a GPU child's time goes: wall time per phase and how many items each handled.

A child (operator_gpu, fused_gpu, program_gpu) times its work in phases (:data:`ORDER`);
time is exclusive: a phase entered inside another (a state restore inside a check) counts in
its own and not in the outer one, so the phases add up to the child's time. Copies are
phases of their own, wherever they happen, by wrapping the replay's methods on its instances
(:meth:`Phases.timed`): ``state`` (memory put on the device: restores, placed inputs) and
``read`` (memory read back to the host). The figures go back in the child's result
(``phases``), into the M3a row, and a one-line :func:`summary` into the progress line.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

ORDER = ("start", "setup", "baseline", "compile", "load", "reference", "check", "fresh",
         "state", "read", "screen", "search", "final")
LABELS = {"start": "process start", "setup": "set-up", "baseline": "original screened",
          "compile": "compile", "load": "load", "reference": "references",
          "check": "checks", "fresh": "fresh checks", "state": "state to device",
          "read": "reads to host", "screen": "screen", "search": "search",
          "final": "final timing"}


class Phases:
    """Exclusive wall time and item counts per phase name (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self._stack: list[list[Any]] = []  # [name, start, seconds spent in inner phases]
        self._t0 = clock()

    @contextlib.contextmanager
    def __call__(self, name: str, n: int = 0) -> Iterator[None]:
        """Time the block as ``name`` (minus the phases entered inside it); ``n`` items."""
        frame: list[Any] = [name, self.clock(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            spent = self.clock() - frame[1]
            self.seconds[name] = self.seconds.get(name, 0.0) + spent - frame[2]
            if self._stack:
                self._stack[-1][2] += spent
            if n:
                self.count(name, n)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def timed(self, obj: Any, method: str, name: str) -> None:
        """Every later call of ``obj.method`` (through the instance, also from its own
        methods) timed as phase ``name``."""
        fn = getattr(obj, method)

        @functools.wraps(fn)
        def wrapped(*args: Any, **kw: Any) -> Any:
            with self(name):
                return fn(*args, **kw)

        setattr(obj, method, wrapped)

    def figures(self, candidates: int | None = None) -> dict[str, Any]:
        """The row's figures: the child's total, per phase its seconds and count."""
        out: dict[str, Any] = {"total_s": round(self.clock() - self._t0, 3),
                               "phases": {k: {"s": round(self.seconds[k], 3),
                                              "n": self.counts.get(k, 0)}
                                          for k in sorted(self.seconds, key=_rank)}}
        if candidates is not None:
            out["candidates"] = candidates
        return out


def watch(ph: Phases, rp: Any, t: Any = None) -> None:
    """A replay's copies (:class:`~kernforge.replay.native.NativeReplay` ``rp``, its probe
    target ``t``) timed as phases of their own: restores and placed inputs as ``state``,
    reads back as ``read``."""
    ph.timed(rp, "restore", "state")
    if t is not None:
        ph.timed(t, "place", "state")
        ph.timed(t, "read", "read")


def _rank(name: str) -> int:
    return ORDER.index(name) if name in ORDER else len(ORDER)


def with_wall(figures: Mapping[str, Any] | None, wall_s: float) -> dict[str, Any] | None:
    """A child's figures with the parent's wall time around it: the difference (process
    start, imports, the CUDA context) is the ``start`` phase."""
    if not figures:
        return None
    out = dict(figures)
    phases = dict(out.get("phases") or {})
    phases["start"] = {"s": round(max(0.0, wall_s - float(out.get("total_s") or 0.0)), 3),
                       "n": 1}
    out["phases"] = {k: phases[k] for k in sorted(phases, key=_rank)}
    out["wall_s"] = round(wall_s, 3)
    return out


def summary(label: str, figures: Mapping[str, Any] | None) -> str:
    """One line: "fused step: 27 candidates in 95 s: compile 12 s, checks 31 s, ..."
    (phases under 0.05 s left out)."""
    if not figures:
        return f"{label}: no phase timings"
    total = figures.get("wall_s", figures.get("total_s"))
    n = figures.get("candidates")
    head = f"{label}: " + (f"{n} candidates in " if n is not None else "") \
        + f"{float(total or 0.0):.1f} s"
    parts = [f"{LABELS.get(k, k)} {float(v['s']):.1f} s"
             for k, v in (figures.get("phases") or {}).items() if float(v["s"]) >= 0.05]
    return head + (": " + ", ".join(parts) if parts else "")
