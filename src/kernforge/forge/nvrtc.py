"""Build stencil operators as dispatch builds them (NVRTC, through CuPy's ``RawModule``), in
parallel worker processes, so that the forge times the code it will deploy.

The cubins of :mod:`kernforge.forge.compile` come from nvcc; dispatch and the bench compile the
same source with NVRTC, and the two can differ (session 11: a temporal operator got 64
registers from nvcc and 76 from NVRTC, one 512-thread block per multiprocessor instead of two,
1.31x slower). Here each worker process builds an operator with ``RawModule(code=...,
options=...).compile()``: exactly what :func:`kernforge.forge.measure.load` does, so CuPy's
kernel cache (``CUPY_CACHE_DIR``, default ``~/.cupy/kernel_cache``) then holds the module that
``load`` finds; a :class:`~kernforge.forge.compile.Built` of this kind carries
:data:`DEPLOYED` in place of a cubin path, and the GPU sessions load it with ``load``. Workers
are spawned (a CUDA context does not survive ``fork``), one per core by default; each
``compile()`` needs the GPU (CuPy reads the architecture from it), so this runs where the
forge measures.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..stencil.operator import Operator
from .compile import Built
from .compile_check import TIMEOUT_S

DEPLOYED = Path("<nvrtc: CuPy's kernel cache>")  # Built.cubin of an operator built here

Work = Callable[[str, tuple[str, ...]], tuple[bool, str, float]]


def build_in_cupy(source: str, options: tuple[str, ...]) -> tuple[bool, str, float]:
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


def _key(op: Operator) -> str:
    return hashlib.sha256("\0".join((op.source, *op.options)).encode()).hexdigest()[:24]


def build_deployed(ops: Iterable[Operator], *, jobs: int | None = None,
                   work: Work = build_in_cupy) -> list[Built]:
    """Build every operator (deduplicated by source and options) as dispatch does, in
    parallel; results in input order. A failed build is a Built without a cubin and with the
    compiler's log; a worker that dies or hangs fails the operators it held."""
    ops = list(ops)
    unique: dict[str, Operator] = {}
    for op in ops:
        unique.setdefault(_key(op), op)
    done: dict[str, tuple[bool, str, float]] = {}
    if unique:
        workers = max(1, min(jobs or os.cpu_count() or 1, len(unique)))
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = {k: pool.submit(work, op.source, tuple(op.options))
                       for k, op in unique.items()}
            for k, fut in futures.items():
                try:
                    done[k] = fut.result(timeout=TIMEOUT_S)
                except BrokenProcessPool:
                    done[k] = (False, "the build process died (NVRTC crashed?)", 0.0)
                except TimeoutError:
                    done[k] = (False, f"NVRTC build timed out after {TIMEOUT_S} s", 0.0)
                    for proc in list(getattr(pool, "_processes", {}).values()):
                        proc.kill()  # else leaving the pool would wait for the hung build
    out = []
    for op in ops:
        ok, log, secs = done[_key(op)]
        out.append(Built(op, DEPLOYED if ok else None, log, secs))
    return out
