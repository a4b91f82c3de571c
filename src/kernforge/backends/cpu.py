"""The ``cpu`` backend: C kernels with OpenMP, built by the host C compiler, called by ctypes.

A variant becomes a shared library (``-shared -fPIC -fopenmp``). The source the compiler sees is
the kernel's code with scalar ``Variant.constants`` compiled in (:mod:`.rewrite`), a
``schedule(...)`` clause added to every ``omp for`` pragma that has none (the ``omp_schedule``
and ``omp_chunk`` knobs), and a tiny exported helper appended that sets the OpenMP thread count
before each launch (through the same libgomp the kernel uses). Libraries are cached on disk,
keyed by that final source, the exact compiler flags and the compiler's identity, so a second
process loads instead of compiling::

    $KERNFORGE_CACHE_DIR/cpu/<sha256>.so      (default ~/.cache/kernforge/cpu/)
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core import (
    BackendUnavailableError,
    CompileError,
    KernelSource,
    LaunchConfig,
    Param,
    SignatureError,
    Variant,
)
from ..core.paths import cache_folder
from . import evict
from .base import Backend, Compiled, Knob
from .evict import FALLBACK_LLC_BYTES, llc_bytes  # noqa: F401  (re-exported)
from .host import HostMemory
from .rewrite import rewrite
from .sanitize import SanitizerRun
from .sanitize_cpu import TOOLS, run_tool
from .signature import parse_signature

COMPILE_TIMEOUT_S = 120.0
SET_THREADS = "kf__set_threads"
HELPER = f"""
/* appended by kernforge: OpenMP threads for the next launch (0 = every processor) */
#include <omp.h>
void {SET_THREADS}(int n) {{ omp_set_num_threads(n > 0 ? n : omp_get_num_procs()); }}
"""
_CTYPES: dict[str, Any] = {
    "int8": ctypes.c_int8, "uint8": ctypes.c_uint8, "int16": ctypes.c_int16,
    "uint16": ctypes.c_uint16, "int32": ctypes.c_int32, "uint32": ctypes.c_uint32,
    "int64": ctypes.c_int64, "uint64": ctypes.c_uint64, "float32": ctypes.c_float,
    "float64": ctypes.c_double, "bool": ctypes.c_bool,
}
_OMP_FOR = re.compile(r"^\s*#\s*pragma\s+omp\s+(?:parallel\s+)?for(?:\s+simd)?\b")
_SCHEDULE = re.compile(r"\bschedule\s*\(")


# ---- pure helpers (tested directly) -------------------------------------------------------
def apply_schedule(code: str, kind: str, chunk: int = 0) -> str:
    """Add ``schedule(kind[, chunk])`` to each ``omp [parallel] for`` pragma that has none.

    ``kind == "default"`` leaves the code unchanged; pragmas that already name a schedule (on
    any of their continuation lines) are left alone.
    """
    if kind == "default":
        return code
    clause = f" schedule({kind}, {chunk})" if chunk else f" schedule({kind})"
    lines = code.split("\n")
    for i, line in enumerate(lines):
        m = _OMP_FOR.match(line)
        if m is None:
            continue
        j = i
        while lines[j].rstrip().endswith("\\") and j + 1 < len(lines):
            j += 1
        if not _SCHEDULE.search(" ".join(lines[i:j + 1])):
            lines[i] = line[: m.end()] + clause + line[m.end():]
    return "\n".join(lines)


def compiler_flags(options: Mapping[str, Any],
                   defines: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The compiler flags for resolved knob values and tunable ``#define``s."""
    flags = [f"-{options['opt_level']}", "-shared", "-fPIC", "-fopenmp"]
    if options["march"] == "native":
        flags.append("-march=native")
    if options["unroll"]:
        flags.append("-funroll-loops")
    flags += {"on": ["-ftree-vectorize"], "off": ["-fno-tree-vectorize"]}.get(
        options["vectorize"], [])
    # Contraction into FMA changes results bit-for-bit and depends on -march, so it is off
    # unless asked for (under a tolerance); fast-math implies it.
    flags.append(f"-ffp-contract={options.get('fp_contract', 'off')}")
    if options["fast_math"]:
        flags.append("-ffast-math")
    flags += [f"-D{name}={value}" for name, value in defines]
    return flags


def find_compiler() -> list[str]:
    """``$CC`` (split like a shell would), else the first of cc/gcc/clang on PATH."""
    words = shlex.split(os.environ.get("CC", ""))
    for name in words[:1] or ["cc", "gcc", "clang"]:
        path = shutil.which(name)
        if path:
            return [path, *words[1:]]
    what = f"CC={os.environ['CC']!r} is not an executable" if words else \
        "no C compiler (cc, gcc, clang) on PATH"
    raise BackendUnavailableError(f"the cpu backend needs a C compiler: {what}",
                                  hint="install gcc or clang (with OpenMP), or set CC to one")


def cache_dir() -> Path:
    """Where compiled libraries live: ``$KERNFORGE_CACHE_DIR/cpu`` or ``~/.cache/kernforge/cpu``
    (created; a ConfigError naming the variable when it cannot be)."""
    return cache_folder("cpu")


def default_threads() -> int:
    """What OpenMP would use when the launch names no thread count: the first value of
    ``OMP_NUM_THREADS`` when set, else the processors this process may run on."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if first.isdigit() and int(first) > 0:
        return int(first)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def _marshal(signature: Sequence[Param], entry: str) -> tuple[list[Any], tuple[bool, ...]]:
    """ctypes argtypes and, per parameter, whether it is passed as a data pointer."""
    argtypes: list[Any] = []
    for p in signature:
        if p.pointer:
            argtypes.append(ctypes.c_void_p)
        elif p.dtype in _CTYPES:
            argtypes.append(_CTYPES[p.dtype])
        else:
            raise SignatureError(
                f"parameter {p.name!r} of {entry} is a {p.ctype!r} scalar, which the cpu backend "
                f"cannot pass by value",
                hint="pass it as float (or double), or through a pointer")
    return argtypes, tuple(p.pointer for p in signature)


# ---- the compiled handle ------------------------------------------------------------------
@dataclass
class CpuKernel:
    """A loaded library: the prepared entry point plus how it was built."""

    fn: Any  # ctypes function, argtypes/restype set
    set_threads: Any  # ctypes function kf__set_threads(int)
    pointers: tuple[bool, ...]
    path: Path
    lib: Any = field(repr=False, default=None)  # keeps the CDLL alive
    info: dict[str, Any] = field(default_factory=dict)

    def __call__(self, args: Sequence[Any], threads: int | None) -> None:
        self.set_threads(threads or 0)
        self.fn(*[a.ctypes.data if p else a for p, a in zip(self.pointers, args)])


TOUCHED_MAX = 64  # buffers remembered for the flush: every side of a comparison, and more


class CpuBackend(HostMemory, Backend):
    """C + OpenMP through the host compiler; "device memory" is host memory."""

    name = "cpu"
    language = "c"

    def __init__(self) -> None:
        super().__init__()
        self._cc = find_compiler()
        self._compiler_id = self._identify(self._cc)
        self._openmp: str | None = None
        self._flush: np.ndarray | None = None
        # the buffers recent launches got, by id, the latest last (at most TOUCHED_MAX)
        self._touched: dict[int, weakref.ref[Any]] = {}
        self._evict: Any = None  # evict.build()'s function, False when none builds here
        self._llc = 0
        self.default_threads = default_threads()

    @staticmethod
    def _identify(cc: list[str]) -> str:
        try:
            proc = subprocess.run([*cc, "--version"], check=False, capture_output=True,
                                  text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            raise BackendUnavailableError(f"C compiler {cc[0]} does not run: {exc}",
                                          hint="set CC to a working gcc or clang") from exc
        first = (proc.stdout or proc.stderr).strip().splitlines()[:1]
        if proc.returncode != 0 or not first:
            raise BackendUnavailableError(f"{shlex.join(cc)} --version failed "
                                          f"(exit {proc.returncode})",
                                          hint="set CC to a working gcc or clang")
        return " ".join([os.path.realpath(cc[0]), *cc[1:], first[0].strip()])

    # ---- Backend interface ------------------------------------------------------------------
    def tuning_dimensions(self, variant: Variant, preset: str) -> dict[str, tuple[Any, ...]]:
        """quick: -O level, -march, unrolling; standard: + vectorization, OpenMP schedule and
        chunk, thread count, constant scalars; full: every knob."""
        dims = super().tuning_dimensions(variant, preset)
        dims.update({"opt.opt_level": ("O2", "O3"), "opt.march": ("default", "native"),
                     "opt.unroll": (False, True)})
        if preset in ("standard", "full"):
            n = self.default_threads
            threads = sorted({t for t in (1, 2, 4, 8, 16, 32, 64) if t < n} | {n})
            dims.update({"opt.vectorize": ("default", "on", "off"),
                         "opt.omp_schedule": ("default", "static", "dynamic", "guided"),
                         "opt.omp_chunk": (0, 1, 8, 64), "launch.threads": tuple(threads),
                         "const.scalars": (False, True)})
        if preset == "full":
            dims["opt.omp_chunk"] = (0, 1, 4, 16, 64, 256)
        return self._recorded_first(variant, dims)

    def knobs(self) -> tuple[Knob, ...]:
        return (
            Knob("opt_level", "choice", "O2", ("O0", "O1", "O2", "O3", "Os"),
                 doc="optimization level -O<n>"),
            Knob("march", "choice", "default", ("default", "native"),
                 doc="native: -march=native (instructions of this CPU)"),
            Knob("unroll", "bool", False, doc="-funroll-loops"),
            Knob("vectorize", "choice", "default", ("default", "on", "off"),
                 doc="on: -ftree-vectorize, off: -fno-tree-vectorize"),
            Knob("fast_math", "bool", False, doc="-ffast-math (results may differ)",
                 needs_tolerance=True),
            Knob("fp_contract", "choice", "off", ("off", "fast"), needs_tolerance=True,
                 doc="-ffp-contract: fast lets the compiler fuse multiply-adds (results "
                     "may differ)"),
            Knob("omp_schedule", "choice", "default", ("default", "static", "dynamic", "guided"),
                 doc="schedule(...) added to omp for pragmas that have none"),
            Knob("omp_chunk", "int", 0, low=0, high=65536,
                 doc="chunk size of omp_schedule (0 = none; ignored with default)"),
        )

    def identity(self) -> dict[str, Any]:
        return {"device": _cpu_model(), "cores": os.cpu_count(), "compiler": self._compiler_id,
                "openmp": self.openmp_version()}

    def deploy_identity(self) -> dict[str, Any]:
        """identity()'s deployment key (the CPU model), without running the compiler."""
        return {"device": _cpu_model()}

    def openmp_version(self) -> str:
        """The compiler's ``_OPENMP`` date (e.g. ``201511``), or ``"unavailable"``."""
        if self._openmp is None:
            try:
                proc = subprocess.run([*self._cc, "-fopenmp", "-dM", "-E", "-x", "c", os.devnull],
                                      check=False, capture_output=True, text=True, timeout=30)
                m = re.search(r"#define _OPENMP (\d+)", proc.stdout)
                self._openmp = m.group(1) if m else "unavailable"
            except (OSError, subprocess.SubprocessError):
                self._openmp = "unavailable"
        return self._openmp

    def parse_signature(self, source: KernelSource,
                        defines: Mapping[str, str] | None = None) -> tuple[Param, ...]:
        return parse_signature(source, substitutions=defines)

    def compile(self, variant: Variant, **kw: Any) -> Compiled:
        compiled = super().compile(variant, **kw)
        if not compiled.info:  # first build in this process: publish how it was built
            compiled.info.update(compiled.handle.info)
        return compiled

    def _compile(self, variant: Variant, signature: tuple[Param, ...]) -> tuple[Any, str]:
        entry = variant.source.entry
        argtypes, pointers = _marshal(signature, entry)
        opts = variant.options.as_dict()
        code, flags = self._final(variant, signature)
        code += "\n" + HELPER
        host = _cpu_model() if opts["march"] == "native" else ""  # -march=native is per-CPU
        key = hashlib.sha256("\0".join([code, shlex.join(flags), self._compiler_id, host])
                             .encode()).hexdigest()
        path = cache_dir() / f"{key}.so"
        hit = path.is_file()
        log = "" if hit else self._build(code, flags, path, entry)
        lib = _load(path, entry)
        fn = lib[entry]
        fn.argtypes, fn.restype = argtypes, None
        set_threads = lib[SET_THREADS]
        set_threads.argtypes, set_threads.restype = [ctypes.c_int], None
        command = shlex.join([self._cc[0], *flags, f"{entry}.c", "-o", str(path), "-lm"])
        info = {"disk_cache": hit, "library": str(path), "flags": flags, "command": command,
                "compiler": self._compiler_id}
        return CpuKernel(fn, set_threads, pointers, path, lib, info), log

    def _final(self, variant: Variant, signature: tuple[Param, ...]) -> tuple[str, list[str]]:
        """The source the compiler sees and the flags (without the launch helper)."""
        opts = variant.options.as_dict()
        code = rewrite(variant.source, signature, constants=dict(variant.constants) or None)
        code = apply_schedule(code, str(opts["omp_schedule"]), int(opts["omp_chunk"]))
        return code, [*self._cc[1:], *compiler_flags(opts, variant.defines)]

    def sanitize(self, compiled: Compiled, args: Sequence[Any]) -> list[SanitizerRun]:
        """ThreadSanitizer and AddressSanitizer builds of the variant, each run once on
        ``args`` (see :mod:`.sanitize_cpu`)."""
        code, flags = self._final(compiled.variant, compiled.signature)
        threads = compiled.variant.launch.threads or self.default_threads
        return [run_tool(self._cc, code, flags, compiled.variant.source.entry,
                         compiled.signature, args, threads, tool) for tool in TOOLS]

    def _build(self, code: str, flags: list[str], out: Path, entry: str) -> str:
        """Compile ``code`` into ``out`` atomically; return the compiler's stderr."""
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, part = tempfile.mkstemp(dir=out.parent, prefix=out.stem[:16] + "-", suffix=".part")
        os.close(fd)
        try:
            with tempfile.TemporaryDirectory(prefix="kernforge-cpu-") as tmp:
                src = Path(tmp) / f"{entry}.c"
                src.write_text(code)
                cmd = [self._cc[0], *flags, str(src), "-o", part, "-lm"]
                proc = _run_compiler(cmd, entry)
            if proc.returncode != 0:
                head = "\n".join(proc.stderr.strip().splitlines()[:12])
                hint = ("the compiler lacks OpenMP: install libgomp/libomp or set CC to gcc"
                        if "omp.h" in proc.stderr else "fix the source, or the flags: "
                        + shlex.join(flags))
                raise CompileError(f"{entry}: the C compiler rejected the variant "
                                   f"(exit {proc.returncode}):\n{head}", log=proc.stderr,
                                   hint=hint)
            os.replace(part, out)
        finally:
            if os.path.exists(part):
                os.unlink(part)
        return proc.stderr

    def _launch(self, handle: Any, args: Sequence[Any], launch: LaunchConfig) -> None:
        # weak: a buffer freed since (another evaluation's) is not flushed, nor kept alive
        for p, a in zip(handle.pointers, args):
            if p and a.nbytes:
                self._touched.pop(id(a), None)
                self._touched[id(a)] = weakref.ref(a)
        while len(self._touched) > TOUCHED_MAX:
            del self._touched[next(iter(self._touched))]
        handle(args, launch.threads or self.default_threads)

    def flush_cache(self) -> None:
        """Evict what a timed run could find warm: the lines of the buffers recent launches
        got, still alive (the run about to be timed reads buffers an earlier launch of it got
        and the restore just rewrote; an interleaved comparison alternates two sets, and
        evicting only the last launch's would leave the other side's warm), flushed from
        every cache level (:mod:`.evict`), the latest first up to twice the last-level cache
        (what came before has been pushed out by then), at a cost proportional to that
        footprint. A sweep of a buffer twice the last-level cache instead when nothing was
        launched yet, the latest buffer alone is larger than that, or no flush helper builds
        on this machine."""
        self._llc = self._llc or llc_bytes()
        ranges: list[tuple[int, int]] = []
        total = 0
        for key, ref in reversed(list(self._touched.items())):  # the latest first
            a = ref()
            if a is None:
                self._touched.pop(key, None)
                continue
            if total + a.nbytes > 2 * self._llc:  # older lines than that are out already
                break
            ranges.append((a.ctypes.data, a.nbytes))
            total += a.nbytes
        if ranges:
            if self._evict is None:
                self._evict = evict.build(self._build, cache_dir(), self._compiler_id) or False
            if self._evict:
                self._evict(ranges)
                return
        if self._flush is None:
            self._flush = np.zeros(2 * self._llc // 8, dtype=np.uint64)
        self._flush += np.uint64(1)


def _run_compiler(cmd: list[str], entry: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, check=False, capture_output=True, text=True,
                              timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise CompileError(f"{entry}: the C compiler timed out after {COMPILE_TIMEOUT_S:g} s",
                           log=str(exc.stderr or ""),
                           hint="simplify the variant (smaller unroll/defines), or raise "
                                "kernforge.backends.cpu.COMPILE_TIMEOUT_S") from None
    except OSError as exc:
        raise CompileError(f"{entry}: the C compiler could not run: {exc}", log=str(exc),
                           hint="check that CC points to a working compiler") from None


def _load(path: Path, entry: str) -> Any:
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise CompileError(f"{entry}: the compiled library does not load: {exc}", log=str(exc),
                           hint="an undefined function? link what the kernel calls, or "
                                "define it in the source") from None
    try:
        lib[entry]
    except AttributeError:
        raise CompileError(f"{entry}: the compiled library exports no symbol {entry!r}",
                           hint="give the entry point external linkage (not static)") from None
    return lib
