"""Build stencil operators as dispatch builds them (NVRTC, through CuPy's ``RawModule``), in
parallel worker processes, so that the forge times the code it will deploy.

The cubins of :mod:`kernforge.forge.compile` come from nvcc; dispatch and the bench compile the
same source with NVRTC, and the two can differ (a temporal operator got 64
registers from nvcc and 76 from NVRTC, one 512-thread block per multiprocessor instead of two,
1.31x slower). Here each worker process builds an operator with ``RawModule(code=...,
options=...).compile()``: exactly what :func:`kernforge.forge.measure.load` does, so CuPy's
kernel cache (``CUPY_CACHE_DIR``, default ``~/.cupy/kernel_cache``) then holds the module that
``load`` finds; a :class:`~kernforge.forge.compile.Built` of this kind is marked
``deployed`` (no cubin), and the GPU sessions load it with ``load``.

The pool is the cuda backend's (:func:`kernforge.backends.cuda_build.build_in_workers`):
workers are spawned (a CUDA context does not survive ``fork``), ``KERNFORGE_BUILD_JOBS`` of
them, else one per usable core up to 16 (each opens a CUDA context: ``compile()`` reads the
architecture from the GPU, so this runs where the forge measures). A worker that dies or hangs
breaks the whole pool; the operators left unfinished are then built again in halves, so only
the operator that crashed (or hung) fails. When every operator fails with one and the same
message (no CuPy, no GPU in the workers), the build raises instead of rejecting them one by one.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable

from ..backends import cuda_modules
from ..backends.cuda_build import TIMEOUT_S, Result, Work, build_in_workers, build_jobs
from ..core import BackendUnavailableError
from ..stencil.operator import Operator
from .compile import Built

__all__ = ["build_deployed", "build_in_cupy", "default_jobs"]


def build_in_cupy(source: str, options: tuple[str, ...]) -> Result:
    """One operator through CuPy's ``RawModule(...).compile()`` (in a worker; the cuda
    backend's :func:`~kernforge.backends.cuda_modules.compile_module`): (ok, log, seconds)."""
    from .measure import cupy_module

    t0 = time.perf_counter()
    cp = cupy_module()
    try:
        cuda_modules.compile_module(cp, source, options)
    except Exception as exc:  # noqa: BLE001 - CompileException (its log), an invalid option
        return False, f"{type(exc).__name__}: {exc}"[-4000:], time.perf_counter() - t0
    return True, "", time.perf_counter() - t0


default_jobs = build_jobs  # KERNFORGE_BUILD_JOBS, else one per usable core up to 16


def _key(op: Operator) -> str:
    return hashlib.sha256("\0".join((op.source, *op.options)).encode()).hexdigest()[:24]


def build_deployed(ops: Iterable[Operator], *, jobs: int | None = None, work: Work = build_in_cupy,
                   timeout_s: float = TIMEOUT_S) -> list[Built]:
    """Build every operator (deduplicated by source and options) as dispatch does, in
    parallel; results in input order. A failed build is a Built without a cubin and with the
    compiler's log."""
    ops = list(ops)
    unique: dict[str, Operator] = {}
    for op in ops:
        unique.setdefault(_key(op), op)
    todo = {k: (op.source, tuple(op.options)) for k, op in unique.items()}
    done = build_in_workers(todo, jobs or default_jobs(), work, timeout_s) if unique else {}
    logs = {log for ok, log, _ in done.values() if not ok}
    if len(done) > 1 and not any(ok for ok, _, _ in done.values()) and len(logs) == 1:
        # one message for every operator: the workers cannot build at all (no CuPy, no GPU),
        # not a compile error of each: stop before a device call is spent on rejections
        raise BackendUnavailableError(
            f"no operator could be built with NVRTC ({len(done)} tried): "
            f"{next(iter(logs))[:500]}",
            hint="run where CuPy sees the GPU, or pass --build nvcc (cubins from nvcc)")
    return [Built(op, None, done[_key(op)][1], done[_key(op)][2], deployed=done[_key(op)][0])
            for op in ops]
