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

Workers are spawned (a CUDA context does not survive ``fork``): ``KERNFORGE_BUILD_JOBS`` of
them, else one per usable core up to 16 (each opens a CUDA context: ``compile()`` reads the
architecture from the GPU, so this runs where the forge measures). A worker that dies or hangs
breaks the whole pool; the operators left unfinished are then built again in halves, so only
the operator that crashed (or hung) fails. When every operator fails with one and the same
message (no CuPy, no GPU in the workers), the build raises instead of rejecting them one by one.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool

from ..core import BackendUnavailableError
from ..stencil.operator import Operator
from .compile import Built
from .compile_check import TIMEOUT_S

MAX_JOBS = 16

Work = Callable[[str, tuple[str, ...]], tuple[bool, str, float]]
Result = tuple[bool, str, float]


def build_in_cupy(source: str, options: tuple[str, ...]) -> Result:
    """One operator through ``RawModule(...).compile()`` (in a worker): (ok, log, seconds)."""
    from ..backends.cupy_hooks import original_class
    from .measure import cupy_module

    t0 = time.perf_counter()
    cp = cupy_module()
    try:
        original_class(cp, "RawModule")(code=source, options=options).compile()
    except Exception as exc:  # noqa: BLE001 - CompileException (its log), an invalid option
        return False, f"{type(exc).__name__}: {exc}"[-4000:], time.perf_counter() - t0
    return True, "", time.perf_counter() - t0


def default_jobs() -> int:
    env = os.environ.get("KERNFORGE_BUILD_JOBS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_JOBS, cores or 1))


def _key(op: Operator) -> str:
    return hashlib.sha256("\0".join((op.source, *op.options)).encode()).hexdigest()[:24]


def _pool_run(todo: dict[str, Operator], jobs: int, work: Work,
              timeout_s: float) -> dict[str, Result]:
    """Build ``todo`` in one pool; after a crash or a hang, what is left unfinished is built
    again in two halves (a single operator left is the culprit: it fails)."""
    done: dict[str, Result] = {}
    lost: list[str] = []
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=max(1, min(jobs, len(todo))), mp_context=ctx)
    try:
        futures = {k: pool.submit(work, op.source, tuple(op.options)) for k, op in todo.items()}
        for k, fut in futures.items():
            if lost:  # the pool is broken or killed: collect what finished, redo the rest
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    done[k] = fut.result()
                else:
                    lost.append(k)
                continue
            try:
                done[k] = fut.result(timeout=timeout_s)
            except BrokenProcessPool:
                lost.append(k)
            except FutureTimeout:
                lost.append(k)
                if len(todo) == 1:
                    done[k] = (False, f"NVRTC build timed out after {timeout_s:.0f} s", 0.0)
                for proc in list(getattr(pool, "_processes", {}).values()):
                    proc.kill()  # else leaving the pool would wait for the hung build
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    lost = [k for k in lost if k not in done]
    if len(lost) == 1 and len(todo) == 1:
        done[lost[0]] = (False, "the build process died (NVRTC crashed?)", 0.0)
    elif lost:
        half = len(lost) // 2 or 1
        for part in (lost[:half], lost[half:]):
            if part:
                done.update(_pool_run({k: todo[k] for k in part}, jobs, work, timeout_s))
    return done


def build_deployed(ops: Iterable[Operator], *, jobs: int | None = None, work: Work = build_in_cupy,
                   timeout_s: float = TIMEOUT_S) -> list[Built]:
    """Build every operator (deduplicated by source and options) as dispatch does, in
    parallel; results in input order. A failed build is a Built without a cubin and with the
    compiler's log."""
    ops = list(ops)
    unique: dict[str, Operator] = {}
    for op in ops:
        unique.setdefault(_key(op), op)
    done = _pool_run(unique, jobs or default_jobs(), work, timeout_s) if unique else {}
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
