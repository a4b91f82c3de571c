"""The measurement protocol: warm up, then restore + flush + one timed run, K times.

Only the backend's clock (:meth:`Backend.time_run`: CUDA events on a GPU, a monotonic clock
around a synchronized call on the CPU) is inside the timed region. The restore of the recorded
prologue and the cache flush always happen *before* the clock starts, never inside it.

What is timed is either one compiled launch (:func:`measure`: replay, tuning, validation) or
any callable that enqueues work on the device (:func:`measure_runs`, :func:`time_once`: a
stencil operator's launches, a baseline library, a copy). Both go through the same loop; the
settings in which callers differ are explicit fields of :class:`Protocol`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends import Backend, Compiled
from ..core import ConfigError, LaunchConfig


@dataclass(frozen=True)
class Protocol:
    """The protocol's knobs, passed around by higher layers (replay, tune, forge).

    ``hold_s``: how long the device queue is held (the cuda backend's spin kernel) before each
    timed run, so that everything the run enqueues is queued before the start event is reached;
    None: the backend's own (cuda: 50 us, enough for one launch and an event; a runner of
    several launches or a library call needs longer). ``warmup_queued``: the warm-up runs are
    enqueued back to back and synchronized once (no hold, no events, no flush between them)
    instead of each being an untimed protocol run (restore, hold, events, synchronize)."""

    warmup: int = 3
    repeat: int = 10
    flush: bool = True
    passes: int = 7  # interleaved A/B comparisons
    per_pass: int = 3  # runs of each side per pass
    hold_s: float | None = None
    warmup_queued: bool = False

    def __post_init__(self) -> None:
        _check_counts(self.warmup, self.repeat)
        if self.passes < 1 or self.per_pass < 1:
            raise ConfigError(f"passes={self.passes} and per_pass={self.per_pass} must be >= 1",
                              hint="an A/B comparison needs at least one pass of one run a "
                                   "side (7 passes of 3 by default)")
        if self.hold_s is not None and not 0 <= self.hold_s <= 1:
            raise ConfigError(f"hold_s={self.hold_s} must be between 0 and 1 second",
                              hint="None keeps the backend's own hold (50 us on cuda)")

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _check_counts(warmup: int, repeat: int) -> None:
    if warmup < 0:
        raise ConfigError(f"warmup={warmup} must be >= 0", hint="use 0 to skip the warm-up")
    if repeat < 0:
        raise ConfigError(f"repeat={repeat} must be >= 0",
                          hint="give the number of timed runs (10 by default)")


def _loop(backend: Backend, timed: Callable[[], float], restore: Callable[[], None] | None,
          queued: Callable[[], None] | None, *, warmup: int, repeat: int,
          flush: bool) -> list[float]:
    """The one protocol loop: ``warmup`` untimed runs (each ``restore`` + ``timed``, or, with
    ``queued``, that enqueued back to back and one synchronize), then ``repeat`` timed runs,
    each preceded by ``restore`` and, when ``flush``, the cache flush."""
    _check_counts(warmup, repeat)
    for _ in range(warmup):
        if restore is not None:
            restore()
        if queued is not None:
            queued()
        else:
            timed()
    if queued is not None:
        backend.synchronize()
    samples: list[float] = []
    for _ in range(repeat):
        if restore is not None:
            restore()
        if flush:
            backend.flush_cache()
        samples.append(float(timed()))
    return samples


def measure(backend: Backend, compiled: Compiled, args: Sequence[Any],
            launch: LaunchConfig | None, restore: Callable[[], None], *,
            warmup: int = 3, repeat: int = 10, flush: bool = True) -> list[float]:
    """Seconds of ``repeat`` timed launches, after ``warmup`` untimed ones.

    Every launch, warm-up included, is preceded by ``restore()``; every timed launch also by
    ``backend.flush_cache()`` when ``flush`` (after the restore, so the restored data is not
    left in the cache). ``launch`` defaults to the compiled variant's launch configuration.
    """
    _check_counts(warmup, repeat)
    cfg = launch or compiled.variant.launch
    backend.check_launch(cfg)
    return _loop(backend, lambda: backend.time_launch(compiled, args, cfg), restore, None,
                 warmup=warmup, repeat=repeat, flush=flush)


def _clock(backend: Backend, run: Callable[[], None], hold_s: float | None, synchronous: bool,
           what: str) -> Callable[[], float]:
    if not synchronous:
        return lambda: float(backend.time_run(run, hold_s=hold_s, what=what))

    def wall() -> float:  # work that blocks until done in a context of its own (Halide)
        backend.synchronize()
        t0 = time.perf_counter()
        run()
        return time.perf_counter() - t0

    return wall


def time_once(backend: Backend, run: Callable[[], None], protocol: Protocol, *,
              restore: Callable[[], None] | None = None, synchronous: bool = False,
              what: str = "kernel") -> float:
    """Seconds of one timed run of ``run()``: ``restore``, the flush (``protocol.flush``),
    then the backend's clock with ``protocol.hold_s``. ``synchronous``: ``run()`` blocks until
    its work is done, outside the backend's stream (a library with its own CUDA context): it is
    timed by the host clock after a synchronize, its call and launch overheads included."""
    return _loop(backend, _clock(backend, run, protocol.hold_s, synchronous, what), restore,
                 None, warmup=0, repeat=1, flush=protocol.flush)[0]


def measure_runs(backend: Backend, run: Callable[[], None], protocol: Protocol, *,
                 restore: Callable[[], None] | None = None, synchronous: bool = False,
                 what: str = "kernel") -> list[float]:
    """Seconds of ``protocol.repeat`` timed runs of ``run()`` after ``protocol.warmup`` untimed
    ones (:func:`time_once` each; the warm-ups as ``protocol.warmup_queued`` says)."""
    return _loop(backend, _clock(backend, run, protocol.hold_s, synchronous, what), restore,
                 run if protocol.warmup_queued else None, warmup=protocol.warmup,
                 repeat=protocol.repeat, flush=protocol.flush)
