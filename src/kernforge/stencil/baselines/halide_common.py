"""The Halide algorithm of every stencil kind, and the runner shared by both Halide baselines.

Algorithm (schedules live in ``halide_hand`` and ``halide_auto``):

- Inputs are ``ImageParam``s over the grid, dimensions ``(x, y, z)`` with x innermost, their
  extents and strides fixed to the cell's shape (Halide then specializes the code to the cell,
  as the forged kernels are).
- The output ``Func`` is defined over interior coordinates; its output buffer has min corner
  ``(r, r, r)`` and extents ``(nx-2r, ny-2r, nz-2r)``, fixed the same way.
- Arithmetic in float32 (fp16 and fp32) or float64; fp16 loads ``Float(16)`` and converts.
- Temporal cells (``star_1_t4``): ``steps - 1`` intermediate Funcs over the grid, each
  ``select(interior, stencil(previous), in)`` (the boundary ring stays the input's), then the
  output Func. The input is wrapped in ``repeat_edge`` because Halide computes an intermediate
  stage over a region grown by ``r`` per later step (points outside the grid only feed boundary
  points, which the ``select`` discards). Where an intermediate grid reaches 2 GiB (1024^3),
  Halide may refuse the fixed-size pipeline ("Allocation size should be a positive number");
  only then is it rebuilt with the output's extents left to the call and ``large_buffers``
  (:func:`build_fixed_or_large`). The fixed pipeline comes first because it is the faster one
  where it builds (H200, star_1_t4 1024^3, Anderson2021: fp32 14.7 ms fixed against 108 ms
  run-time-sized, fp64 52 against 192 ms).

Runner: JIT-compiled once; the inputs are copied once into Halide buffers and, for a GPU target,
to the device (Halide keeps its own CUDA context, so it cannot use CuPy's memory); the output
buffer is allocated on the device once. ``run()`` realizes into that buffer and waits
(``device_sync``): ``synchronous = True``, time it with the wall clock; that time includes the
call into the pipeline and its launch overhead. Because Halide's device memory is its own, the
runner works on a *snapshot* of its input arrays (taken at construction): after changing them in
place, call :meth:`HalideRunner.reload` (``reload_inputs = True`` says so) before ``run()``.
"""

from __future__ import annotations

import ctypes
import glob
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...core import BackendUnavailableError, KernforgeError
from ..spec import Cell
from ._arrays import input_roles, inputs_by_role, to_host

CUDA_TARGET = "host-cuda-cuda_capability_86"
"""Halide 21 targets at most compute capability 8.6; the driver JIT-compiles its PTX for sm_90."""


def large_grids(cell: Cell) -> bool:
    """Whether the pipeline allocates intermediate grids of 2 GiB or more (a temporal cell at
    1024^3). Halide may compute such a constant allocation size in 32 bits and refuse it
    ("Allocation size should be a positive number"); these cells may then be built with the
    output extents unfixed (sizes computed at run time) and ``large_buffers`` (64-bit sizes
    and indexing): :func:`build_fixed_or_large`."""
    return cell.stencil.temporal and cell.shape.points * cell.precision.itemsize >= 2**31


def target_for(target: str, large: bool) -> str:
    """``target``, with ``large_buffers`` for the run-time-sized (``large``) pipeline."""
    if large and "large_buffers" not in target:
        return f"{target}-large_buffers"
    return target


ALLOCATION_REFUSED = "Allocation size should be a positive number"  # Halide's 32-bit size check


def build_fixed_or_large(cell: Cell, make: Callable[[bool], HalideRunner]) -> HalideRunner:
    """``make(False)``: the pipeline with every extent fixed to the cell. Only for a cell with
    :func:`large_grids` whose fixed pipeline Halide cannot build, ``make(True)``: output extents
    left to the call and ``large_buffers``; its info keeps the fixed build's error."""
    try:
        runner = make(False)
    except KernforgeError as exc:
        if not large_grids(cell) or ALLOCATION_REFUSED not in str(exc):
            raise  # any other failure is the baseline's own, not a size limit
        runner = make(True)
        runner.info["fixed_extents_error"] = str(exc)[:500]
    runner.info["run_time_extents"] = runner.info.get("fixed_extents_error") is not None
    return runner


def import_halide() -> Any:
    try:
        import halide
    except ImportError as exc:
        raise BackendUnavailableError(
            "the Halide baselines need the halide package",
            hint="pip install halide==21.0.0 (Linux x86_64 wheels on PyPI); without it the "
                 "bench skips the Halide baselines") from exc
    return halide


_REUSE_SYMBOL = "_ZN6Halide8Internal16JITSharedRuntime24reuse_device_allocationsEb"


def reuse_device_allocations(hl: Any) -> bool:
    """Turn on the JIT runtime's device allocation cache; False where it cannot be reached.

    Without it Halide allocates (``cuMemAlloc``) and frees (``cuMemFree``, which synchronizes)
    every intermediate buffer at every run. ``halide_reuse_device_allocations`` is the runtime's
    documented switch; the Python bindings do not expose it, so this calls
    ``Halide::Internal::JITSharedRuntime::reuse_device_allocations(bool)`` in libHalide.
    Call it after a ``compile_jit`` (it acts on the JIT runtimes that exist).
    """
    root = os.path.dirname(hl.__file__)
    libs = sorted(glob.glob(os.path.join(root, "lib*", "libHalide.so*")))
    if not libs:
        return False
    try:
        # the copy the halide module already loaded (never a second one)
        lib = ctypes.CDLL(libs[0], mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        fn = getattr(lib, _REUSE_SYMBOL)
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_bool]
    fn.restype = None
    fn(True)
    return True


@dataclass
class Algorithm:
    """A cell's Halide Funcs: ``params`` (role -> ImageParam), ``output``, ``stages``."""

    cell: Cell
    hl: Any
    params: dict[str, Any]
    output: Any
    vars: tuple[Any, Any, Any]
    stages: list[Any] = field(default_factory=list)

    @property
    def funcs(self) -> list[Any]:
        """Every Func that is computed (intermediate stages first, the output last)."""
        return [*self.stages, self.output]

    def extent(self, func: Any) -> tuple[int, int, int]:
        """The (x, y, z) extent ``func`` is computed over (an intermediate stage: grown)."""
        nz, ny, nx = self.cell.shape.array_shape
        r = self.cell.radius
        if func is self.output:
            return nx - 2 * r, ny - 2 * r, nz - 2 * r
        grow = 2 * r * (len(self.stages) - 1 - self.stages.index(func))
        return nx + grow, ny + grow, nz + grow


def _storage_and_acc(hl: Any, cell: Cell) -> tuple[Any, Any]:
    bits = {"fp16": 16, "fp32": 32, "fp64": 64}[cell.precision.value]
    return hl.Float(bits), hl.Float(64 if bits == 64 else 32)


def _fix_dims(param: Any, mins: tuple[int, int, int],
              extents: tuple[int, int, int]) -> None:
    stride = 1
    for d in range(3):
        param.dim(d).set_bounds(mins[d], extents[d]).set_stride(stride)
        stride *= extents[d]


def define(cell: Cell, large: bool = False) -> Algorithm:
    """The cell's algorithm, unscheduled; ``large``: the output's extents left to the call (for
    :func:`build_fixed_or_large`)."""
    hl = import_halide()
    storage, acc = _storage_and_acc(hl, cell)
    const = hl.f64 if acc.bits() == 64 else hl.f32
    nz, ny, nx = cell.shape.array_shape
    r = cell.radius
    spec = cell.stencil
    x, y, z = hl.Var("x"), hl.Var("y"), hl.Var("z")
    params: dict[str, Any] = {}
    for role in input_roles(cell):
        p = hl.ImageParam(storage, 3, "grid" if role == "in" else role)
        _fix_dims(p, (0, 0, 0), (nx, ny, nz))
        p.set_estimates([hl.Range(0, nx), hl.Range(0, ny), hl.Range(0, nz)])
        params[role] = p

    def weighted(src: Any, skip_center: bool = False) -> Any:
        total = None
        for w, (dz, dy, dx) in zip(spec.weights, spec.offsets, strict=True):
            if skip_center and (dz, dy, dx) == (0, 0, 0):
                continue
            term = const(float(w)) * hl.cast(acc, src[x + dx, y + dy, z + dz])
            total = term if total is None else total + term
        return total

    grid = params["in"]
    stages: list[Any] = []
    out = hl.Func("stencil_out")
    if spec.kind == "varcoeff":
        center = const(float(spec.weights[0])) * hl.cast(acc, grid[x, y, z])
        coef = hl.cast(acc, params["coef"][x, y, z])
        out[x, y, z] = hl.cast(storage, center + coef * weighted(grid, skip_center=True))
    elif spec.steps == 1:
        out[x, y, z] = hl.cast(storage, weighted(grid))
    else:
        src = hl.BoundaryConditions.repeat_edge(
            grid, [hl.Range(0, nx), hl.Range(0, ny), hl.Range(0, nz)])
        inside = ((x >= r) & (x < nx - r) & (y >= r) & (y < ny - r)
                  & (z >= r) & (z < nz - r))
        prev = src
        for s in range(spec.steps - 1):
            f = hl.Func(f"stencil_step{s + 1}")
            f[x, y, z] = hl.select(inside, hl.cast(storage, weighted(prev)), src[x, y, z])
            stages.append(f)
            prev = f
        out[x, y, z] = hl.cast(storage, weighted(prev))
    mins = (r, r, r)
    ext = (nx - 2 * r, ny - 2 * r, nz - 2 * r)
    if not large:
        _fix_dims(out.output_buffer(), mins, ext)
    out.set_estimates([hl.Range(m, e) for m, e in zip(mins, ext, strict=True)])
    return Algorithm(cell, hl, params, out, (x, y, z), stages)


def schedule_cpu(alg: Algorithm) -> None:
    """A plain host schedule (tests): stages computed at root, z parallel, x vectorized."""
    x, _, z = alg.vars
    for f in alg.funcs:
        f.compute_root().parallel(z).vectorize(x, 8)


class HalideRunner:
    """Runs a scheduled :class:`Algorithm` (see the module doc)."""

    synchronous = True
    output_region = "interior"
    reload_inputs = True  # run() reads a snapshot: call reload() after changing the inputs

    def __init__(self, name: str, alg: Algorithm, target: str, arrays: Any,
                 info: dict[str, Any] | None = None) -> None:
        hl = alg.hl
        self.name = name
        self.cell = alg.cell
        self._hl = hl
        self._alg = alg
        self.target = hl.Target(target)
        self.gpu = bool(self.target.has_gpu_feature())
        self.info: dict[str, Any] = dict(info or {})
        self.info["target"] = self.target.to_string()
        self._pipeline = hl.Pipeline(alg.output)
        t0 = time.perf_counter()
        try:
            self._pipeline.compile_jit(self.target)
        except Exception as exc:  # Halide raises its own RuntimeError / CompileError types
            raise KernforgeError(f"{self.cell.id}: Halide could not compile {name}: {exc}",
                                 hint="see the schedule in the runner's info") from exc
        self.info["compile_seconds"] = time.perf_counter() - t0
        self.info["device_allocation_reuse"] = self.gpu and reuse_device_allocations(hl)
        self._sources = inputs_by_role(self.cell, arrays)
        self._host: dict[str, np.ndarray] = {}
        self._bufs: dict[str, Any] = {}
        self.reload()
        storage, _ = _storage_and_acc(hl, self.cell)
        nxi, nyi, nzi = alg.extent(alg.output)
        r = self.cell.radius
        self._out = hl.Buffer(storage, [nxi, nyi, nzi])
        self._out.set_min([r, r, r])
        if self.gpu:
            self._check(self._out.device_malloc(self.target), "device_malloc")
        t0 = time.perf_counter()
        self.run()  # warm-up: the driver compiles the PTX, Halide allocates what it keeps
        self.info["first_run_seconds"] = time.perf_counter() - t0
        self._check_no_copies()

    def reload(self, arrays: Any = None) -> None:
        """Snapshot the input arrays (those given at construction, or ``arrays``: numpy, CuPy
        or torch) and put the copy where the code runs (Halide's device memory, or the host)."""
        if arrays is not None:
            self._sources = inputs_by_role(self.cell, arrays)
        for role, arr in self._sources.items():
            host = to_host(arr)
            buf = self._bufs.get(role)
            if buf is not None and self.gpu:  # refill the same host and device memory
                self._host[role][...] = host
                buf.set_host_dirty(True)
            else:
                buf = self._hl.Buffer(host)  # x innermost: numpy's last axis; borrows `host`
                self._host[role] = host
                self._bufs[role] = buf
                self._alg.params[role].set(buf)
            if self.gpu:
                self._check(buf.copy_to_device(self.target), "copy_to_device")

    def run(self) -> None:
        self._pipeline.realize(self._out, self.target)
        if self.gpu:
            self._out.device_sync()

    def output(self) -> np.ndarray:
        """The interior, ``(nz-2r, ny-2r, nx-2r)``, copied to the host."""
        if self.gpu:
            self._check(self._out.copy_to_host(), "copy_to_host")
        return np.array(self._out, copy=True)

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise KernforgeError(f"{self.cell.id}: Halide {what} failed (error {rc})",
                                 hint="is a CUDA device visible to this process?")

    def _check_no_copies(self) -> None:
        """After a run on the GPU nothing is dirty on the host: no copy happens in ``run()``."""
        if not self.gpu:
            return
        dirty = [role for role, b in self._bufs.items() if b.host_dirty()]
        if dirty or self._out.host_dirty():
            raise KernforgeError(f"{self.cell.id}: Halide buffers {dirty or ['out']} are dirty "
                                 "on the host; run() would copy them",
                                 hint="a bug in the Halide runner")
        self.info["output_device_dirty"] = bool(self._out.device_dirty())
