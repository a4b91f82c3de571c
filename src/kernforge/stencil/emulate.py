"""Run an operator's CUDA kernels on the host, to check generated operators without a GPU (CI).

:func:`emulate` applies an :class:`~kernforge.stencil.operator.Operator`'s launches in order to
numpy arrays named by role. Its CUDA source is compiled by the host C++ compiler (``$CXX``, else
g++, c++ or clang++; ``-O1 -std=c++20``) behind a prelude that maps the CUDA dialect onto C++
(:mod:`.emulate_cxx`), and every block of a launch runs on ``blockDim.x*y*z`` host threads,
blocks one after another (:mod:`.emulate_runtime`). Libraries are cached on disk by the source,
the flags and the compiler's identity (``$KERNFORGE_CACHE_DIR/emulate``, default
``~/.cache/kernforge/emulate``); :func:`build` compiles many operators in parallel.

Emulated: ``threadIdx``/``blockIdx``/``blockDim``/``gridDim`` (``thread_local``), the execution
space and inlining qualifiers, ``__launch_bounds__``, ``__align__``, static ``__shared__``
(function-``static``: blocks run one at a time, so it is exactly one block's shared memory) and
``extern __shared__`` (the launch's ``shared_bytes``, 0xFF-poisoned before each block),
``__syncthreads`` (+ ``_count/_and/_or``), ``__syncwarp``, ``__shfl*_sync``, ``__ballot/any/all_sync``
(warp barriers over real threads, full masks only), atomics, fences, ``__ldg`` and the cache-hinted
loads/stores, CUDA's ``min``/``max``, the common ``__f*_rn``/bit intrinsics, the vector types with
``make_*``, ``__half``/``__half2`` (``_Float16`` where the compiler has it, else an exact 16-bit
struct), ``assert``/``__trap`` (reported as :class:`KernelRuntimeError`, not an abort), ``printf``.
A kernel in which every live thread of a block waits in a barrier that cannot complete fails
with a deadlock report. ``__CUDA_ARCH__`` is 900 (sm_90).

Not emulated: inline PTX (``asm``), cooperative groups, textures/surfaces, ``__nv_bfloat16``,
FP8, tensor cores (``wmma``/``mma``), ``cuda::``/``cub`` headers, partial-warp masks, warp-synchronous
code that relies on lockstep lanes without ``__syncwarp`` (threads really run concurrently), clusters
and distributed shared memory, ``clock()``, device-side launches. Timing means nothing. An
infinite loop hangs the call; a wild pointer can crash the process (arrays are copied into
guarded buffers, so small overruns are caught instead: see :func:`emulate`).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core import (
    BackendUnavailableError,
    CompileError,
    ConfigError,
    KernelRuntimeError,
    LaunchError,
)
from ..core.paths import cache_folder
from .emulate_cxx import module_source
from .emulate_runtime import RUNTIME
from .operator import Launch, Operator
from .spec import Cell

FLAGS = ("-O1", "-std=c++20", "-shared", "-fPIC", "-pthread", "-fvisibility=hidden",
         "-fno-strict-aliasing")
RUNTIME_FLAGS = ("-O2", "-std=c++20", "-shared", "-fPIC", "-pthread", "-fvisibility=hidden")
COMPILE_TIMEOUT_S = 300.0
MAX_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = ((1 << 31) - 1, 65535, 65535)
MAX_SHARED_BYTES = 227 * 1024  # the H200's opt-in maximum per block
GUARD_BYTE = 0xFF  # a NaN in every float type
BLOCK_ORDERS = ("forward", "reverse", "shuffle")

_lock = threading.Lock()
_loaded: dict[str, Module] = {}
_runtime: Any = None


def find_compiler() -> list[str]:
    """``$CXX`` (split like a shell would), else the first of g++, c++, clang++ on PATH."""
    words = shlex.split(os.environ.get("CXX", ""))
    for name in words[:1] or ["g++", "c++", "clang++"]:
        path = shutil.which(name)
        if path:
            return [path, *words[1:]]
    raise BackendUnavailableError("the CUDA host emulator needs a C++20 compiler (g++, clang++)",
                                  hint="install g++ or set CXX")


def cache_dir() -> Path:
    return cache_folder("emulate")


_ids: dict[str, str] = {}


def _compiler_id(cxx: list[str]) -> str:
    key = shlex.join(cxx)
    if key not in _ids:
        proc = subprocess.run([*cxx, "--version"], capture_output=True, text=True, check=False)
        _ids[key] = f"{key}: {proc.stdout.strip()}"
    return _ids[key]


def _compile(code: str, flags: Sequence[str], what: str) -> Path:
    """``code`` as a shared library in the cache (compiled unless there); CompileError on failure."""
    cxx = find_compiler()
    key = hashlib.sha256("\0".join([code, shlex.join(flags), _compiler_id(cxx)]).encode())
    out = cache_dir() / f"{key.hexdigest()[:40]}.so"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kernforge-emulate-") as tmp:
        src, part = Path(tmp) / "module.cpp", Path(tmp) / "module.so"
        src.write_text(code)
        cmd = [*cxx, *flags, str(src), "-o", str(part)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                                  timeout=COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise CompileError(f"{what}: the host compiler timed out", log=str(exc.stderr or ""),
                               hint="emulate smaller operators") from None
        if proc.returncode != 0:
            head = "\n".join(proc.stderr.strip().splitlines()[:16])
            raise CompileError(f"{what}: the host compiler rejected it (exit {proc.returncode}):"
                               f"\n{head}", log=proc.stderr,
                               hint="lines of operator.cu are the CUDA source's; see "
                                    "kernforge.stencil.emulate for what is emulated")
        fd, tmp_out = tempfile.mkstemp(dir=out.parent, suffix=".part")
        os.close(fd)
        try:
            shutil.copyfile(part, tmp_out)
            os.replace(tmp_out, out)  # atomic: a concurrent compile of the same key is harmless
        finally:
            if os.path.exists(tmp_out):
                os.unlink(tmp_out)
    return out


def _load_runtime() -> Any:
    global _runtime
    with _lock:
        if _runtime is None:
            lib = ctypes.CDLL(str(_compile(RUNTIME, RUNTIME_FLAGS, "the emulator runtime")))
            fn = lib.kf_emu_launch
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulonglong]
            fn.restype = ctypes.c_int
            _runtime = (lib, fn)
        return _runtime[1]


@dataclass
class Module:
    """One compiled CUDA source: launch its entries on numpy arrays (no guards: see emulate)."""

    path: Path
    entries: tuple[str, ...]
    lib: Any
    lock: threading.Lock
    bounds: Mapping[str, int] = field(default_factory=dict)  # entry -> __launch_bounds__

    def params(self, entry: str) -> list[int]:
        """Per parameter: the pointee's size for a pointer (0 for void*), -1 for a scalar."""
        fn = self._fn("kf_params_", entry)
        sizes = (ctypes.c_int * 64)()
        n = fn(sizes, 64)
        return list(sizes[:min(n, 64)])

    def _fn(self, prefix: str, entry: str) -> Any:
        if entry not in self.entries:
            raise LaunchError(f"{entry!r} is not an entry of this module ({self.entries})",
                              hint="compile with every entry the launches name")
        return getattr(self.lib, prefix + entry)

    def launch(self, entry: str, arrays: Sequence[np.ndarray], grid: Sequence[int],
               block: Sequence[int], shared_bytes: int = 0,
               order: np.ndarray | None = None) -> None:
        """Run ``entry<<<grid, block, shared_bytes>>>(arrays...)``: an array for each pointer
        parameter, a 0-d array (its value, of the parameter's width) for each scalar one;
        ``order``: the linear block indices in the order to run them (a permutation; None: x
        fastest, then y, z)."""
        check_launch(entry, tuple(grid), tuple(block), shared_bytes)
        limit = self.bounds.get(entry)
        if limit is not None and int(np.prod(block)) > limit:
            # the emulator ignores __launch_bounds__; a GPU refuses the launch
            raise LaunchError(f"{entry}: a block of {tuple(block)} threads exceeds the kernel's "
                              f"__launch_bounds__({limit})", hint="launch at most that many "
                              "threads per block or raise the bound")
        sizes = self.params(entry)
        if len(sizes) != len(arrays):
            raise LaunchError(f"{entry} takes {len(sizes)} parameters, the launch passes "
                              f"{len(arrays)}", hint="one array per kernel parameter")
        for i, (size, a) in enumerate(zip(sizes, arrays, strict=True)):
            if size < 0 and a.ndim == 0:  # a scalar parameter, passed by value (its width
                continue  # is the caller's to match)
            if size < 0 or (size and size != a.dtype.itemsize):
                what = "a scalar" if size < 0 else f"a pointer to {size}-byte elements"
                raise LaunchError(f"{entry}: parameter {i} is {what}, the launch passes "
                                  f"{a.dtype} elements", hint="match the kernel's signature")
            if not a.flags.c_contiguous:
                raise LaunchError(f"{entry}: argument {i} is not C-contiguous",
                                  hint="np.ascontiguousarray")
        nblocks = int(np.prod(grid))
        if order is not None:
            order = np.ascontiguousarray(order, dtype=np.uint64)
            if order.shape != (nblocks,) or not np.array_equal(np.sort(order),
                                                               np.arange(nblocks)):
                raise LaunchError("order must be a permutation of the linear block indices",
                                  hint=f"np.random.permutation({nblocks})")
        values = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        args = (ctypes.c_void_p * max(len(arrays), 1))(
            *[a.ctypes.data if a.ndim == 0 and size < 0 else
              ctypes.addressof(values) + i * ctypes.sizeof(ctypes.c_void_p)
              for i, (size, a) in enumerate(zip(sizes, arrays, strict=True))])
        err = ctypes.create_string_buffer(4096)
        run = _load_runtime()
        thunk = ctypes.cast(self._fn("kf_thunk_", entry), ctypes.c_void_p)
        with self.lock:  # function-static __shared__ arrays belong to the module
            rc = run(thunk, args, (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block),
                     shared_bytes, None if order is None else order.ctypes.data, err, len(err))
        message = err.value.decode(errors="replace")
        if rc == 1:
            raise KernelRuntimeError(f"{entry}<<<{tuple(grid)}, {tuple(block)}>>> failed on the "
                                     f"host emulator: {message}", hint="fix the kernel")
        if rc != 0:
            raise LaunchError(f"{entry}: {message}", hint="raise the process/thread limits")


def check_launch(entry: str, grid: tuple[int, ...], block: tuple[int, ...],
                 shared_bytes: int) -> None:
    """The CUDA limits a launch must respect (sm_90), as LaunchError."""
    if len(grid) != 3 or len(block) != 3:
        raise LaunchError(f"{entry}: grid and block must have 3 extents", hint="(x, y, z)")
    threads = block[0] * block[1] * block[2]
    bad = (min(grid) < 1 or min(block) < 1 or threads > MAX_THREADS
           or any(b > m for b, m in zip(block, MAX_BLOCK, strict=True))
           or any(g > m for g, m in zip(grid, MAX_GRID, strict=True)))
    if bad:
        raise LaunchError(f"{entry}: invalid launch grid={grid} block={block}",
                          hint=f"block <= {MAX_BLOCK} with <= {MAX_THREADS} threads, "
                               f"grid <= {MAX_GRID}")
    if not 0 <= shared_bytes <= MAX_SHARED_BYTES:
        raise LaunchError(f"{entry}: {shared_bytes} bytes of dynamic shared memory",
                          hint=f"at most {MAX_SHARED_BYTES}")


_BOUNDS = re.compile(r"__launch_bounds__\s*\(\s*(\d+)\s*(?:,[^)]*)?\)\s*(\w+)\s*\(")


def launch_bounds(source: str) -> dict[str, int]:
    """Entry name -> the maximum threads per block its ``__launch_bounds__`` declares (literal
    bounds only)."""
    return {m.group(2): int(m.group(1)) for m in _BOUNDS.finditer(source)}


def compile_source(source: str, entries: Iterable[str],
                   defines: Mapping[str, object] | None = None) -> Module:
    """Compile CUDA ``source`` for the host with a launcher per entry (cached on disk and here);
    ``defines``: macros set before the prelude (``KF_NO_FLOAT16``: the 16-bit struct ``__half``)."""
    names = tuple(dict.fromkeys(entries))
    macros = tuple((str(k), str(v)) for k, v in (defines or {}).items())
    try:
        code = module_source(source, names, macros)
    except ValueError as exc:
        raise ConfigError(str(exc), hint="extern \"C\" kernel names, identifier macros") from None
    path = _compile(code, FLAGS, f"emulated {', '.join(names)}")
    with _lock:
        if str(path) not in _loaded:
            _loaded[str(path)] = Module(path, names, ctypes.CDLL(str(path)), threading.Lock(),
                                        launch_bounds(source))
        return _loaded[str(path)]


def compile_operator(op: Operator) -> Module:
    return compile_source(op.source, op.entries())


def build(ops: Iterable[Operator], jobs: int | None = None) -> list[Module]:
    """Compile many operators in parallel (``jobs`` compilers; default: the processors)."""
    todo = list(ops)
    _load_runtime()
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        return list(pool.map(compile_operator, todo))


# ---- operators on role arrays --------------------------------------------------------------
class _Guarded:
    """A copy of an array in a 256-byte-aligned buffer between two guard zones of 0xFF bytes
    (NaN for every float type), at least as large as the array: an out-of-bounds read brings
    NaN into the results, an out-of-bounds write is seen in the guards."""

    def __init__(self, a: np.ndarray) -> None:
        self.nbytes = a.nbytes
        self.guard = max(4096, -(-a.nbytes // 256) * 256)
        self.raw = np.full(self.nbytes + 2 * self.guard + 256, GUARD_BYTE, dtype=np.uint8)
        self.start = (-self.raw.ctypes.data) % 256 + self.guard
        self.view = self.raw[self.start:self.start + self.nbytes].view(a.dtype).reshape(a.shape)
        self.view[...] = a

    def overrun(self) -> tuple[int, int]:
        """Bytes changed in the guard before and after the array."""
        before = self.raw[self.start - self.guard:self.start]
        after = self.raw[self.start + self.nbytes:self.start + self.nbytes + self.guard]
        return int(np.count_nonzero(before != GUARD_BYTE)), int(np.count_nonzero(after != GUARD_BYTE))


def _cell(op: Operator) -> Cell | None:
    try:
        return Cell.parse(op.cell_id)
    except ConfigError:
        return None


def block_order(launch: Launch, how: str, seed: int) -> np.ndarray | None:
    n = int(np.prod(launch.grid))
    if how == "forward":
        return None
    if how == "reverse":
        return np.arange(n - 1, -1, -1, dtype=np.uint64)
    if how == "shuffle":
        return np.random.default_rng(seed).permutation(n).astype(np.uint64)
    raise ConfigError(f"unknown block order {how!r}", hint=f"one of {', '.join(BLOCK_ORDERS)}")


def emulate(op: Operator, cell_arrays: Mapping[str, np.ndarray], *, order: str = "shuffle",
            seed: int = 0) -> None:
    """Apply ``op``'s launches in order to the arrays named by role, mutated in place.

    ``tmp`` may be left out when a launch names it: it is then a copy of ``out`` (whose boundary
    the caller preset). Each array runs in a guarded copy (see :class:`_Guarded`), copied back
    when the launches are done; writes outside an array or into ``in``/``coef`` raise
    :class:`KernelRuntimeError` (after the copy-back, so the output can be inspected). Blocks run
    in ``order``: "shuffle" (seeded; CUDA promises no order, so a kernel that depends on one
    shows), "forward" or "reverse". When ``op.cell_id`` names a cell, every array must have its
    shape and storage dtype.
    """
    roles = list(dict.fromkeys(r for launch in op.launches for r in launch.args))
    arrays = dict(cell_arrays)
    if "tmp" in roles and "tmp" not in arrays and "out" in arrays:
        arrays["tmp"] = np.array(arrays["out"], copy=True)
    missing = [r for r in roles if r not in arrays]
    if missing:
        raise ConfigError(f"{op.cell_id}: no array for role(s) {missing}",
                          hint=f"pass {', '.join(roles)}")
    cell = _cell(op)
    for role in roles:
        a = arrays[role]
        if cell is not None and (a.shape != cell.shape.array_shape
                                 or a.dtype != cell.precision.dtype):
            raise ConfigError(f"{op.cell_id}: {role} is {a.dtype}{list(a.shape)}, the cell "
                              f"needs {cell.precision.dtype}{list(cell.shape.array_shape)}",
                              hint="arrays of shape (nz, ny, nx) in the storage dtype")
    module = compile_operator(op)
    guarded = {role: _Guarded(np.asarray(arrays[role])) for role in roles}
    inputs = {r: guarded[r].view.copy() for r in roles if r in ("in", "coef")}
    try:
        for k, launch in enumerate(op.launches):
            module.launch(launch.entry, [guarded[r].view for r in launch.args], launch.grid,
                          launch.block, launch.shared_bytes, block_order(launch, order, seed + k))
            bad = {r: g.overrun() for r, g in guarded.items() if any(g.overrun())}
            if bad:
                where = ", ".join(f"{r}: {b} bytes before, {a} after" for r, (b, a) in bad.items())
                raise KernelRuntimeError(f"{op.cell_id} launch {k} ({launch.entry}) wrote outside "
                                         f"its arrays ({where})", hint="check the bounds")
        written = [r for r, v in inputs.items()
                   if v.tobytes() != guarded[r].view.tobytes()]
        if written:
            raise KernelRuntimeError(f"{op.cell_id}: the operator wrote into input(s) {written}",
                                     hint="in and coef are read-only")
    finally:
        for role in roles:
            if role in cell_arrays and role not in ("in", "coef"):
                cell_arrays[role][...] = guarded[role].view
