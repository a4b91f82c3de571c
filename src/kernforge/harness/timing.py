"""The measurement protocol: warm up, then restore + flush + one timed launch, K times.

Only :meth:`Backend.time_launch` is inside the timed region (CUDA events on a GPU, a monotonic
clock around a synchronized call on the CPU). The restore of the recorded prologue and the
cache flush always happen *before* the clock starts, never inside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends import Backend, Compiled
from ..core import ConfigError, LaunchConfig


@dataclass(frozen=True)
class Protocol:
    """The protocol's knobs, passed around by higher layers (replay, tune, forge)."""

    warmup: int = 3
    repeat: int = 10
    flush: bool = True
    passes: int = 7  # interleaved A/B comparisons

    def __post_init__(self) -> None:
        _check_counts(self.warmup, self.repeat)
        if self.passes < 1:
            raise ConfigError(f"passes={self.passes} must be >= 1",
                              hint="an A/B comparison needs at least one pass (7 by default)")


def _check_counts(warmup: int, repeat: int) -> None:
    if warmup < 0:
        raise ConfigError(f"warmup={warmup} must be >= 0", hint="use 0 to skip the warm-up")
    if repeat < 0:
        raise ConfigError(f"repeat={repeat} must be >= 0",
                          hint="give the number of timed runs (10 by default)")


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
    for _ in range(warmup):
        restore()
        backend.time_launch(compiled, args, cfg)
    samples: list[float] = []
    for _ in range(repeat):
        restore()
        if flush:
            backend.flush_cache()
        samples.append(float(backend.time_launch(compiled, args, cfg)))
    return samples
