"""Stencil operators and baselines on the GPU: device fields, loading, checking, timing.

- :class:`DeviceCell`: a cell's fields by role (``in``, ``coef``, ``out``, ``tmp``) on the device
  (or in numpy, for tests), refreshed with fresh random inputs from a seed at every check;
  ``out`` and ``tmp`` are preset to the input with their interior poisoned (NaN), so a point an
  operator does not write fails the oracle, and the boundary it must not touch is the input's.
- :func:`load` compiles an :class:`~kernforge.stencil.operator.Operator` with NVRTC through
  the cuda backend (:func:`kernforge.backends.cuda_modules.load_source`: CuPy's module, the
  operator's options; entries are ``extern "C"``);
  :class:`OperatorRunner` applies it (its launches in order, roles mapped to the cell's fields).
- :class:`Runner`: what timing takes, so baselines plug in; :class:`GpuDevice` times any runner
  through the harness's protocol (:func:`kernforge.harness.timing.measure_runs` and
  :func:`~kernforge.harness.timing.time_once` with the settings :data:`PROTOCOL`: warm-up runs
  queued back to back; before each timed run the L2 flushed and the stream held 1 ms by the
  backend's spin kernel; CUDA events; median of ``repeat``), compares two runners interleaved
  (:func:`kernforge.harness.compare.interleave`) and measures the device-to-device copy
  bandwidth with the same protocol.

CuPy is imported only when a :class:`GpuDevice` is made (or a cupy :class:`DeviceCell`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from ..backends import cuda_modules
from ..core import (
    ConfigError,
    LaunchError,
)
from ..harness.checkers import CheckResult
from ..harness.compare import ABResult, interleave
from ..harness.stats import median
from ..harness.timing import Protocol as Timing
from ..harness.timing import measure_runs, time_once
from ..stencil import oracle
from ..stencil.operator import Operator
from ..stencil.spec import Cell
from . import oracle_check

# The forge's, the bench's and the probe's settings of the harness protocol; every stencil figure
# in docs/benchmarks/ was timed with them. The stream is held 1 ms (not the backend's 50 us)
# so that a runner of several launches or a library call is wholly enqueued before the start
# event is reached; warm-up runs are queued back to back (docs/stencil.md, "Measuring").
PROTOCOL = Timing(warmup=3, repeat=10, flush=True, passes=7, per_pass=3, hold_s=1e-3,
                    warmup_queued=True)
MAX_COPY_BYTES = 2 << 30


class Device(Protocol):
    """What the bench needs from a device (:class:`GpuDevice`; tests use a numpy stand-in)."""

    xp: Any

    def identity(self) -> dict[str, Any]: ...

    def allocate(self, cell: Cell, seed: int) -> DeviceCell: ...

    def operator_runner(self, op: Operator, dcell: DeviceCell, name: str = "") -> Runner: ...

    def synchronize(self) -> None: ...

    def once(self, runner: Runner) -> float: ...

    def measure(self, runner: Runner, *, warmup: int = PROTOCOL.warmup,
                repeat: int = PROTOCOL.repeat) -> list[float]: ...

    def compare(self, a: Runner, b: Runner, *, passes: int = PROTOCOL.passes,
                per_pass: int = PROTOCOL.per_pass,
                seed: int = 0) -> ABResult: ...

    def copy_bandwidth(self, nbytes: int, *, repeat: int = 10) -> CopyBandwidth: ...

    def copy_runner(self, nbytes: int, method: str) -> Runner: ...  # a CopyRunner's kind

    def release(self) -> None: ...


class Runner(Protocol):
    """One way of applying a cell's stencil (an operator, a baseline, a copy).

    ``run()`` enqueues one complete application on the current stream (the legacy default
    stream, which CuPy and PyTorch use unless told otherwise) and does not synchronize; it
    reads the cell's fields at every call (they are refreshed in place between checks).
    ``output()`` returns the result as a device array (cupy, or anything with
    ``__cuda_array_interface__``): either the **full grid** (shape ``(nz, ny, nx)``, boundary
    as preset, then checked unchanged) or only the **interior** (shape ``(nz-2r, ny-2r,
    nx-2r)``); the oracle tells the two apart by shape.
    """

    name: str

    def run(self) -> None: ...

    def output(self) -> Any: ...


def cupy_module() -> Any:
    from ..backends.cuda import require_cupy

    return require_cupy("stencil measurements", "run on a machine with a GPU and cupy-cuda13x; "
                        "`kernforge stencil check --compile-only` needs only nvcc")


@dataclass
class DeviceCell:
    """A cell's fields by role; ``seed`` is the one the current inputs were drawn from."""

    cell: Cell
    xp: Any
    fields: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    @classmethod
    def allocate(cls, cell: Cell, seed: int = 0, *, xp: Any = None,
                 tmp: bool = False) -> DeviceCell:
        """Fields on the device (``xp`` None: cupy), inputs drawn from ``seed``."""
        xp = cupy_module() if xp is None else xp
        dc = cls(cell, xp)
        shape, dtype = cell.shape.array_shape, cell.precision.dtype
        roles = ("in", "coef", "out") if cell.stencil.kind == "varcoeff" else ("in", "out")
        for role in roles + (("tmp",) if tmp else ()):
            dc.fields[role] = xp.empty(shape, dtype=dtype)
        dc.refresh(seed)
        return dc

    def field(self, role: str) -> Any:
        """A field by role; ``tmp`` is allocated (and preset) on first use."""
        if role == "tmp" and role not in self.fields:
            self.fields["tmp"] = self.xp.empty(self.cell.shape.array_shape,
                                               dtype=self.cell.precision.dtype)
            self._preset(self.fields["tmp"])
        try:
            return self.fields[role]
        except KeyError:
            raise LaunchError(f"{self.cell.id} has no {role!r} field",
                              hint="coef exists for varcoeff cells only") from None

    def _preset(self, a: Any) -> None:
        r = self.cell.radius
        a[...] = self.fields["in"]
        a[r:-r, r:-r, r:-r] = np.nan  # poison: an unwritten interior point fails the oracle

    def refresh(self, seed: int) -> None:
        """Fresh random inputs from ``seed`` (written in place: runners keep their references),
        ``out`` and ``tmp`` preset again."""
        for role, value in oracle.random_fields(self.cell, seed, self.xp).items():
            self.fields[role][...] = value
        for role in ("out", "tmp"):
            if role in self.fields:
                self._preset(self.fields[role])
        self.seed = seed

    def check(self, output: Any, *, points: int = oracle.DEFAULT_POINTS) -> CheckResult:
        """``output`` (full grid or interior) against the oracle on the current inputs (the
        harness's checker with the oracle plugged in: :mod:`.oracle_check`)."""
        return oracle_check.check(self.cell, self.fields, self.xp.asarray(output),
                                  seed=self.seed, points=points)

    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.fields.values()))


# ---- operators -------------------------------------------------------------------------------
@dataclass
class LoadedOperator:
    op: Operator
    functions: dict[str, Any]
    info: dict[str, Any]


def load(op: Operator) -> LoadedOperator:
    """Compile ``op`` with NVRTC; a compiler error becomes :class:`CompileError`."""
    cp = cupy_module()
    fns = cuda_modules.load_source(cp, op.source, op.options, op.entries(),
                                   what=f"{op.cell_id} ({op.key})")
    info = {e: {"num_regs": int(f.num_regs), "max_threads": int(f.max_threads_per_block),
                "local_bytes": int(f.local_size_bytes)} for e, f in fns.items()}
    configure(op, fns)
    return LoadedOperator(op, fns, info)


def configure(op: Operator, fns: dict[str, Any]) -> None:
    """Check each launch's block against its function's limit and set the function attributes
    the launch asks for: more than 48 KiB of dynamic shared memory (an opt-in), the preferred
    shared-memory carveout. A refusal is a :class:`LaunchError`."""
    for launch in op.launches:
        fn = fns[launch.entry]
        threads = launch.block[0] * launch.block[1] * launch.block[2]
        if threads > int(fn.max_threads_per_block):
            raise LaunchError(f"{op.key}: block {launch.block} exceeds {launch.entry}'s limit of "
                              f"{fn.max_threads_per_block} threads", hint="use a smaller block")
        if launch.shared_bytes > 48 * 1024:  # opt in to more than 48 KiB (cuFuncSetAttribute)
            try:
                fn.max_dynamic_shared_size_bytes = launch.shared_bytes
            except Exception as exc:  # CUDADriverError: more than the device allows
                raise LaunchError(f"{op.key}: {launch.shared_bytes} bytes of shared memory "
                                  f"refused: {exc}", hint="use a smaller tile") from exc
        if launch.carveout >= 0:
            try:
                fn.preferred_shared_memory_carveout = launch.carveout
            except Exception as exc:  # CUDADriverError, or a CuPy without the attribute
                raise LaunchError(f"{op.key}: shared-memory carveout {launch.carveout}% "
                                  f"refused: {exc}", hint="leave the carveout to the driver "
                                  "(l1=0)") from exc


class OperatorRunner:
    """Applies a loaded operator to a :class:`DeviceCell`; its output is the full ``out``."""

    def __init__(self, loaded: LoadedOperator, dcell: DeviceCell, name: str = "") -> None:
        self.name = name or loaded.op.design
        self.loaded = loaded
        self.dcell = dcell
        for launch in loaded.op.launches:  # allocate tmp now, not inside a timed run
            for role in launch.args:
                dcell.field(role)

    def run(self) -> None:
        fns, f = self.loaded.functions, self.dcell.fields
        try:
            for launch in self.loaded.op.launches:
                fns[launch.entry](launch.grid, launch.block, tuple(f[r] for r in launch.args),
                                  shared_mem=launch.shared_bytes)
        except Exception as exc:  # CUDADriverError: bad grid, too much shared memory
            raise LaunchError(f"{self.loaded.op.cell_id} ({self.loaded.op.key}): launch "
                              f"failed: {exc}") from exc

    def output(self) -> Any:
        return self.dcell.fields["out"]


_COPY_SOURCE = r"""
extern "C" __global__ void kf_copy16(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                     long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
"""


class CopyRunner:
    """A device-to-device copy of ``nbytes``: ``memcpy`` (cudaMemcpyAsync) or ``kernel``
    (16-byte loads and stores, one per thread)."""

    def __init__(self, cp: Any, nbytes: int, method: str = "memcpy") -> None:
        self.name = f"copy-{method}"
        self.nbytes = nbytes - nbytes % 16
        self.method = method
        self.src = cp.zeros(self.nbytes, dtype=cp.uint8)
        self.dst = cp.empty(self.nbytes, dtype=cp.uint8)
        self.kernel = None
        if method == "kernel":
            mod = cuda_modules.source_module(cp, _COPY_SOURCE)
            self.kernel = mod.get_function("kf_copy16")
        elif method != "memcpy":
            raise ValueError(f"unknown copy method {method!r}")

    def run(self) -> None:
        if self.kernel is None:
            self.dst.data.copy_from_device_async(self.src.data, self.nbytes)
        else:
            n = self.nbytes // 16
            self.kernel((-(-n // 256),), (256,), (self.src, self.dst, np.int64(n)))

    def output(self) -> Any:
        return self.dst


@dataclass(frozen=True)
class CopyBandwidth:
    """Bytes read plus written per second, the median of the timed copies (best method)."""

    bytes_per_s: float
    nbytes: int
    seconds: float
    method: str
    by_method: dict[str, float]  # method -> bytes/s

    def to_json(self) -> dict[str, Any]:
        return {"bytes_per_s": self.bytes_per_s, "nbytes": self.nbytes,
                "seconds": self.seconds, "method": self.method, "by_method": self.by_method}


class GpuDevice:
    """Timing on the current CUDA device through the harness protocol (see the module
    docstring) with the settings ``protocol`` (default :data:`PROTOCOL`).

    The clock, the L2 flush and the stream hold are the cuda backend's own
    (:meth:`CudaBackend.time_run`, :meth:`CudaBackend.flush_cache`,
    :meth:`CudaBackend.hold_stream`); ``backend``: another one with an array module ``cp``
    (tests)."""

    def __init__(self, *, protocol: Timing = PROTOCOL, backend: Any = None) -> None:
        if backend is None:
            from ..backends.cuda import CudaBackend

            backend = CudaBackend()
        self.backend = backend
        self.cp = backend.cp
        self.xp = self.cp
        self.protocol = protocol
        self._copies: dict[int, CopyBandwidth] = {}

    def identity(self) -> dict[str, Any]:
        return dict(self.backend.identity())

    def allocate(self, cell: Cell, seed: int) -> DeviceCell:
        return DeviceCell.allocate(cell, seed, xp=self.cp)

    def operator_runner(self, op: Operator, dcell: DeviceCell, name: str = "") -> Runner:
        return OperatorRunner(load(op), dcell, name)

    def synchronize(self) -> None:
        self.backend.synchronize()

    def once(self, runner: Runner) -> float:
        """Seconds of one application: cache flushed, stream held, CUDA events around it
        (:func:`~kernforge.harness.timing.time_once`).

        A runner that works in its own CUDA context and blocks until done (``synchronous``:
        Halide) is timed by the wall clock around ``run()`` after the flush has finished; that
        time includes its call and launch overheads (a few microseconds per launch)."""
        return time_once(self.backend, runner.run, self.protocol,
                         synchronous=bool(getattr(runner, "synchronous", False)),
                         what=runner.name)

    def measure(self, runner: Runner, *, warmup: int = PROTOCOL.warmup,
                repeat: int = PROTOCOL.repeat) -> list[float]:
        """Seconds of ``repeat`` timed runs after ``warmup`` untimed ones
        (:func:`~kernforge.harness.timing.measure_runs`)."""
        if warmup < 0 or repeat < 1:
            raise ConfigError(f"warmup={warmup} and repeat={repeat}: need warmup >= 0 and "
                              f"repeat >= 1", hint="e.g. --warmup 3 --repeat 10")
        return measure_runs(self.backend, runner.run,
                            replace(self.protocol, warmup=warmup, repeat=repeat),
                            synchronous=bool(getattr(runner, "synchronous", False)),
                            what=runner.name)

    def compare(self, a: Runner, b: Runner, *, passes: int = PROTOCOL.passes,
                per_pass: int = PROTOCOL.per_pass,
                seed: int = 0) -> ABResult:
        """Interleaved A/B: ``speedup`` > 1 when ``b`` is faster than ``a``."""
        return interleave(lambda: self.once(a), lambda: self.once(b), passes=passes,
                          per_pass=per_pass, seed=seed)

    def copy_bandwidth(self, nbytes: int, *, repeat: int = 10) -> CopyBandwidth:
        """The copy bandwidth over ``min(nbytes, 2 GiB)`` bytes, best of the memcpy and the copy
        kernel (each the median of ``repeat`` runs); measured once per size and device."""
        size = max(16, min(MAX_COPY_BYTES, int(nbytes)))
        size -= size % 16
        if size not in self._copies:
            self._copies[size] = measure_copy(self, size, repeat=repeat)
        return self._copies[size]

    def copy_runner(self, nbytes: int, method: str) -> Runner:
        """A device-to-device copy of ``nbytes`` by ``method`` (``memcpy`` or ``kernel``)."""
        return CopyRunner(self.cp, nbytes, method)

    def release(self) -> None:
        """Give cached device memory back (CuPy's pool; PyTorch's if it is loaded)."""
        import sys

        self.synchronize()
        self.cp.get_default_memory_pool().free_all_blocks()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def measure_copy(device: GpuDevice, nbytes: int, *, repeat: int = 10,
                 methods: tuple[str, ...] = ("memcpy", "kernel")) -> CopyBandwidth:
    rates: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for method in methods:
        runner = CopyRunner(device.cp, nbytes, method)
        t = median(device.measure(runner, warmup=2, repeat=repeat))
        seconds[method] = t
        rates[method] = 2 * runner.nbytes / t if t > 0 else float("inf")
        del runner
    best = max(rates, key=lambda m: rates[m])
    return CopyBandwidth(rates[best], nbytes, seconds[best], best, rates)

