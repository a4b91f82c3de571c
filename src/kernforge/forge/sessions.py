"""Measurement sessions for the forge loop: on the GPU (CUDA events, the harness protocol) and
on the host emulator (CI: the whole loop runs, the timings mean nothing).

A session holds one cell's fields for one round; operators come precompiled (cubins for the
GPU, host builds for the emulator) and are cached per session by their key. Operators built by
:mod:`kernforge.forge.nvrtc` (the default, and the final pass of an nvcc run) are loaded as
dispatch loads them (:func:`measure.load`, from CuPy's kernel cache); cubins through the cuda
backend (:func:`kernforge.backends.cuda_modules.load_image`): the same source can
compile to different code with nvcc (a temporal operator got 64 registers from nvcc
and 76 from NVRTC, half the blocks per multiprocessor, 1.31x slower).
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..backends import cuda_modules
from ..core import CompileError, KernelRuntimeError, KernforgeError
from ..harness.compare import interleave
from ..harness.stats import median
from ..stencil import emulate
from ..stencil.spec import Cell
from .compile import Built
from .measure import (
    DeviceCell,
    GpuDevice,
    LoadedOperator,
    OperatorRunner,
    configure,
    cupy_module,
    load,
)

_SEEDS = itertools.count(1)  # fresh inputs at every check, never the same seed twice in a run


def load_cubin(built: Built) -> LoadedOperator:
    """The operator's kernels from its cubin; a cubin the driver refuses (built by a newer
    nvcc than the driver knows, a missing entry) is a LaunchError: a rejected candidate."""
    fns = cuda_modules.load_image(cupy_module(), Path(str(built.cubin)), built.op.entries(),
                                  what=built.op.key)
    info = {e: {"num_regs": int(f.num_regs)} for e, f in fns.items()}
    configure(built.op, fns)
    return LoadedOperator(built.op, fns, info)


def _seed(seed: int | None) -> int:
    """``seed``, or the run's next one (a caller that replays or isolates sessions draws them
    itself, in the same order, so that every check gets the inputs of an in-process run)."""
    return next(_SEEDS) if seed is None else seed


@contextlib.contextmanager
def _typed(what: str) -> Iterator[None]:
    """A CUDA error that is not yet a typed one (a fault seen at a synchronize) as the
    candidate's :class:`KernelRuntimeError`."""
    try:
        yield
    except KernforgeError:
        raise
    except Exception as exc:  # CUDADriverError, CUDARuntimeError, ...
        raise KernelRuntimeError(f"{what} failed on the device: {exc}",
                                 hint="the CUDA context is unusable after this; run it under "
                                      "compute-sanitizer to see where it fails") from exc


class GpuSession:
    def __init__(self, device: GpuDevice, cell: Cell, *, screen_repeat: int = 5,
                 passes: int = 5, seed: int | None = None) -> None:
        self.device = device
        self.dcell = DeviceCell.allocate(cell, _seed(seed), xp=device.cp)
        self.screen_repeat = screen_repeat
        self.passes = passes
        self._runners: dict[str, OperatorRunner] = {}

    def _runner(self, built: Built) -> OperatorRunner:
        if built.op.key not in self._runners:
            if not built.ok:
                raise CompileError(f"{built.op.key}: not built: {built.log[-500:]}",
                                   log=built.log)
            loaded = load(built.op) if built.deployed else load_cubin(built)
            self._runners[built.op.key] = OperatorRunner(loaded, self.dcell, built.op.key)
        return self._runners[built.op.key]

    def screen(self, built: Built) -> float:
        with _typed(built.op.key):
            return median(self.device.measure(self._runner(built), warmup=2,
                                              repeat=self.screen_repeat))

    def compare(self, a: Built, b: Built) -> tuple[float, float, float, float, float]:
        with _typed(f"{a.op.key} against {b.op.key}"):
            r = self.device.compare(self._runner(a), self._runner(b), passes=self.passes)
        return r.speedup, r.ci_low, r.ci_high, r.median_a, r.median_b

    def check(self, built: Built, seed: int | None = None) -> tuple[bool, float, str]:
        with _typed(built.op.key):
            runner = self._runner(built)
            self.dcell.refresh(_seed(seed))
            runner.run()
            self.device.synchronize()
            res = self.dcell.check(runner.output())
        return bool(res.ok), float(res.error), str(res.detail)


@contextlib.contextmanager
def gpu_sessions(device: GpuDevice, cell: Cell, **kw: Any) -> Iterator[GpuSession]:
    session = GpuSession(device, cell, **kw)
    try:
        yield session
    finally:
        session._runners.clear()
        session.dcell.fields.clear()
        device.release()


class EmulatedSession:
    """The loop's plumbing on a machine without a GPU: real kernels (emulated), real oracle,
    wall-clock timings of the emulator (meaningless as performance)."""

    def __init__(self, cell: Cell, seed: int | None = None) -> None:
        import numpy as np

        self.cell = cell
        self.np = np
        self.dcell = DeviceCell.allocate(cell, _seed(seed), xp=np, tmp=True)

    def _apply(self, built: Built) -> float:
        arrays = {role: a for role, a in self.dcell.fields.items()}
        t0 = time.perf_counter()
        emulate.emulate(built.op, arrays)
        return time.perf_counter() - t0

    def screen(self, built: Built) -> float:
        return median([self._apply(built) for _ in range(2)])

    def compare(self, a: Built, b: Built) -> tuple[float, float, float, float, float]:
        # the emulator's wall clock is no performance: two passes, no verdict drawn
        r = interleave(lambda: self._apply(a), lambda: self._apply(b), passes=2, per_pass=1,
                       judged=False)
        return r.speedup, r.ci_low, r.ci_high, r.median_a, r.median_b

    def check(self, built: Built, seed: int | None = None) -> tuple[bool, float, str]:
        self.dcell.refresh(_seed(seed))
        self._apply(built)
        res = self.dcell.check(self.dcell.fields["out"])
        return bool(res.ok), float(res.error), str(res.detail)


@contextlib.contextmanager
def emulated_sessions(cell: Cell, seed: int | None = None) -> Iterator[EmulatedSession]:
    yield EmulatedSession(cell, seed)


def emulated_compiler(ops: Any) -> list[Built]:
    """The host emulator's builds in place of cubins (compile errors become failed builds)."""
    from ..core import CompileError

    out = []
    for op in ops:
        t0 = time.perf_counter()
        try:
            emulate.compile_operator(op)
            out.append(Built(op, _HOST, "", time.perf_counter() - t0))
        except CompileError as exc:
            out.append(Built(op, None, exc.log or str(exc), time.perf_counter() - t0))
    return out


_HOST = __import__("pathlib").Path("host-emulator")
