"""Replaying a native unit through the driver API, under the same protocol as every replay.

The cuda backend places the recorded allocations again (:mod:`kernforge.backends.placement`:
at their recorded virtual addresses, or relocated with the parameter words pointing into them),
builds a candidate's module image (:mod:`kernforge.backends.image_build`) and launches from raw
parameter bytes (:mod:`kernforge.backends.driver`). Here: restore before every run, verify
bitwise (or under a declared tolerance), time with events after an L2 flush, re-verify after
the last timed run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends.driver import JIT_OPTIONS, Driver
from ..backends.image_build import load_kernel
from ..backends.placement import Placement, place, relocate
from ..core import (
    BufferCheck,
    ConfigError,
    KernelRuntimeError,
    KernforgeError,
    LaunchError,
    Measurement,
    Status,
    Tolerance,
)
from ..core.native import NativeBuild, NativeLaunch, NativeRecording
from ..harness.compare import ABResult, interleave
from ..harness.verify import check_buffer, passes
from .native_sequence import SequenceLaunches


@dataclass(frozen=True)
class NativeVariant:
    """What can change in a native kernel: the block shape (the grid is scaled so the same
    threads are launched), PTX JIT options, the shared-memory carveout, and the image itself
    (``build``: its source compiled again with other options or evolved, or the PTX of its
    fatbin; see :mod:`kernforge.backends.image_build`)."""

    block: tuple[int, int, int] | None = None
    jit: tuple[tuple[str, int], ...] = ()
    carveout: int | None = None
    build: NativeBuild | None = None

    def __post_init__(self) -> None:
        for k, _ in self.jit:
            if k not in JIT_OPTIONS:
                raise ConfigError(f"unknown JIT option {k!r}",
                                  hint=f"use one of {', '.join(JIT_OPTIONS)}")
        if self.block is not None and (len(self.block) != 3 or min(self.block) < 1):
            raise ConfigError(f"block {self.block!r} must be three positive integers")
        if self.carveout is not None and not 0 <= self.carveout <= 100:
            raise ConfigError(f"carveout {self.carveout} must be a percentage (0-100)")

    def geometry(self, rec: NativeRecording | NativeLaunch
                 ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        if self.block is None:
            return rec.grid, rec.block
        grid = tuple(math.ceil(g * b / nb) for g, b, nb in zip(rec.grid, rec.block, self.block))
        return grid, self.block  # type: ignore[return-value]

    @property
    def is_recorded(self) -> bool:
        return self.block is None and not self.jit and self.carveout is None \
            and self.build is None

    def label(self) -> str:
        parts = [f"block={'x'.join(map(str, self.block))}"] if self.block else []
        parts += [f"{k}={v}" for k, v in self.jit]
        parts += [f"carveout={self.carveout}"] if self.carveout is not None else []
        parts += [self.build.label()] if self.build is not None else []
        return " ".join(parts) or "recorded"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"block": list(self.block) if self.block else None,
                               "jit": dict(self.jit), "carveout": self.carveout}
        if self.build is not None:
            out["build"] = self.build.to_json()
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> NativeVariant:
        b = d.get("block")
        return cls(tuple(b) if b else None,  # type: ignore[arg-type]
                   tuple(sorted((str(k), int(v)) for k, v in (d.get("jit") or {}).items())),
                   d.get("carveout"),
                   NativeBuild.from_json(d["build"]) if d.get("build") else None)


class NativeReplay:
    """A native unit's memory placed on the device, ready to run variants of its kernel (of a
    sequence unit: its launches in order, :mod:`.native_sequence`). ``placed``: the replay of
    another recording over the same regions (a sequence's first launch) whose placement this
    one shares."""

    def __init__(self, rec: NativeRecording, driver: Driver | None = None, *,
                 fixed: bool = True, placed: NativeReplay | None = None) -> None:
        self.rec = rec
        self.drv: Driver = placed.drv if placed is not None else driver or Driver()
        self.placement: Placement = placed.placement if placed is not None else place(
            self.drv, [(r.address, r.size) for r in rec.regions], fixed=fixed)
        self.addr: list[int] = list(self.placement.addr)
        self.relocated: list[int] = list(self.placement.relocated)
        self.params = relocate(rec.param_bytes, rec.pointer_words(), self.placement)
        self.image = rec.image_bytes()
        self._fns: dict[NativeVariant, Any] = {}
        self.sequence = SequenceLaunches(self) if rec.is_sequence else None

    def restore(self, only_written: bool = False) -> None:
        for i, r in enumerate(self.rec.regions):
            if not only_written or r.epilogue is not None:
                self.drv.htod(self.addr[i], np.ascontiguousarray(self.rec.prologue(i)))

    def _function(self, v: NativeVariant) -> Any:
        if v not in self._fns:
            self._fns[v] = load_kernel(self.drv, self.rec, v.build, jit=dict(v.jit),
                                       carveout=v.carveout, image=self.image)
        return self._fns[v]

    def run(self, v: NativeVariant) -> None:
        if self.sequence is not None:
            self.sequence.run(v)
            return
        grid, block = v.geometry(self.rec)
        self.drv.launch(self._function(v), grid, block, self.rec.shared_mem, self.params,
                        self.rec.launch_attrs)
        self.drv.synchronize()

    def time(self, v: NativeVariant, *, flush: bool = True) -> float:
        self.restore(only_written=True)
        if flush:
            self.drv.flush_l2()
        if self.sequence is not None:
            return self.sequence.time(v)
        grid, block = v.geometry(self.rec)
        return self.drv.time_launch(self._function(v), grid, block, self.rec.shared_mem,
                                    self.params, self.rec.launch_attrs)

    def _compared(self, tolerance: Tolerance | None, dtype: str | None
                  ) -> Iterator[tuple[str, np.ndarray, np.ndarray, Tolerance | None]]:
        """Per region, one at a time: its name, its contents now and the recorded ones, as
        the dtype under ``tolerance`` where it applies (written regions), else bytes."""
        for i, r in enumerate(self.rec.regions):
            got = np.frombuffer(self.drv.dtoh(self.addr[i], r.size), dtype=np.uint8)
            ref = np.asarray(self.rec.expected(i), dtype=np.uint8)
            name = f"region{i}@{r.address:#x}"
            if tolerance is not None and dtype and r.epilogue is not None \
                    and r.size % np.dtype(dtype).itemsize == 0:
                yield name, got.view(dtype), ref.view(dtype), tolerance
            else:
                yield name, got, ref, None

    def verify(self, tolerance: Tolerance | None = None, dtype: str | None = None
               ) -> tuple[BufferCheck, ...]:
        return tuple(check_buffer(n, got, ref) if tol is None else
                     check_buffer(n, got, ref, tol)
                     for n, got, ref, tol in self._compared(tolerance, dtype))

    def passes(self, tolerance: Tolerance | None = None, dtype: str | None = None) -> bool:
        """Whether :meth:`verify` would pass every region, without its error figures
        (:func:`~kernforge.harness.verify.passes`: much less host work on large regions)."""
        return all(passes(got, ref) if tol is None else passes(got, ref, tol)
                   for _, got, ref, tol in self._compared(tolerance, dtype))


def _failed(exc: BaseException, stages: list[tuple[str, float]]) -> Measurement:
    status = Status.RUNTIME_FAILED if isinstance(exc, KernelRuntimeError) else \
        Status.LAUNCH_FAILED if isinstance(exc, LaunchError) else \
        exc.status if isinstance(exc, KernforgeError) and exc.status else Status.RUNTIME_FAILED
    msg = exc.message if isinstance(exc, KernforgeError) else f"{type(exc).__name__}: {exc}"
    return Measurement(status, msg, stages=tuple(stages))


def evaluate(rp: NativeReplay, v: NativeVariant, *, warmup: int = 3, repeat: int = 10,
             tolerance: Tolerance | None = None, dtype: str | None = None,
             flush: bool = True) -> Measurement:
    """Restore, run, verify; time ``repeat`` runs after ``warmup`` (the L2 flushed before each
    unless ``flush`` is False); verify again."""
    stages: list[tuple[str, float]] = []
    try:
        t = time.perf_counter()
        rp.restore()
        rp.run(v)
        checks = rp.verify(tolerance, dtype)
        stages.append(("verify", time.perf_counter() - t))
        extra = (("relocated", tuple(rp.relocated)),) if rp.relocated else ()
        if not all(c.passed for c in checks):
            bad = "; ".join(c.describe() for c in checks if not c.passed)
            return Measurement(Status.WRONG_RESULT, bad, checks=checks, stages=tuple(stages),
                               extra=extra)
        t = time.perf_counter()
        for _ in range(warmup):
            rp.time(v, flush=flush)
        samples = tuple(rp.time(v, flush=flush) for _ in range(repeat))
        stages.append(("time", time.perf_counter() - t))
        rp.restore()
        rp.run(v)
        again = rp.verify(tolerance, dtype)
        if not all(c.passed for c in again):
            return Measurement(Status.WRONG_RESULT, "results changed between runs: "
                               + "; ".join(c.describe() for c in again if not c.passed),
                               checks=again, samples=samples, stages=tuple(stages), extra=extra)
        return Measurement(Status.OK, "", samples=samples, checks=checks, stages=tuple(stages),
                           extra=extra)
    except KernforgeError as exc:
        return _failed(exc, stages)


def compare(rp: NativeReplay, a: NativeVariant, b: NativeVariant, *, passes: int = 7,
            per_pass: int = 5, max_passes: int | None = None) -> ABResult:
    """Interleaved A/B of two verified variants, as every comparison is taken
    (:func:`~kernforge.harness.compare.interleave`: the median of the per-pass ratios, its
    distribution-free interval; more passes, up to ``max_passes``, while inconclusive)."""
    return interleave(lambda: rp.time(a), lambda: rp.time(b), passes=passes, per_pass=per_pass,
                      max_passes=max_passes)
