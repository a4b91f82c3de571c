"""Builds of many CUDA sources at once, for the forge and the stencil matrix's checks.

- nvcc: :func:`build_cubins` compiles sources to cubins in a cache keyed by the caller, one nvcc
  process per source, as many at once as :func:`nvcc_jobs` (nvcc spends much of its wall time
  outside the CPU); :func:`check_cubin` compiles one source only to see that it compiles;
  :func:`nvcc_ptx` and :func:`ptxas_registers` give what the registers audit compares.
  :func:`nvcc_options` turns a source's NVRTC options into nvcc's (flush-to-zero on, as CuPy
  builds every NVRTC module).
- NVRTC as CuPy builds (what dispatch loads): :func:`build_in_workers` runs a build function
  over many sources in spawned worker processes (a CUDA context does not survive ``fork``), one
  per core up to :data:`MAX_JOBS` (``KERNFORGE_BUILD_JOBS`` overrides). A worker that dies or
  hangs breaks the whole pool; the sources left unfinished are then built again in halves, so
  only the one that crashed (or hung) fails.

A build result is ``(ok, log, seconds)`` (NVRTC) or a :class:`CubinBuild` (nvcc); a source that
does not compile is a result, not an exception: the forge rejects that candidate and goes on.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from ..core import BackendUnavailableError, ConfigError

TIMEOUT_S = 300
MAX_JOBS = 16
NVRTC_ONLY = ("-default-device", "--device-as-default-execution-space",
              "-builtin-move-forward", "-builtin-initializer-list", "--no-builtin-move-forward",
              "--no-builtin-initializer-list", "-pch", "--pch")

Result = tuple[bool, str, float]  # (ok, log, seconds) of one NVRTC build
Work = Callable[[str, tuple[str, ...]], Result]


# ---- nvcc ------------------------------------------------------------------------------------
def nvcc_options(options: Sequence[str], arch: str) -> list[str]:
    """NVRTC ``options`` for nvcc, with flush-to-zero on as CuPy builds every NVRTC module
    (it appends ``-ftz=true``), so that the cubins compute what dispatch does."""
    opts = [o for o in options if o.split("=")[0] not in NVRTC_ONLY
            and not o.startswith(("-ftz", "--ftz"))]
    opts.append("-ftz=true")  # CuPy appends it after the caller's options: the last one wins
    if not any(o.startswith(("-arch", "--gpu-architecture", "-gencode")) for o in opts):
        opts.insert(0, f"-arch={arch}")
    return opts


def nvcc_jobs() -> int:
    """nvcc spends much of its wall time outside the CPU: twice the cores, at least 4."""
    return max(4, 2 * (os.cpu_count() or 1))


def find_nvcc(nvcc: str | None = None) -> str:
    """``nvcc`` (or ``$NVCC``, else ``nvcc``) on PATH; a BackendUnavailableError without it."""
    path = shutil.which(nvcc or os.environ.get("NVCC", "nvcc"))
    if path is None:
        raise BackendUnavailableError(f"{nvcc or 'nvcc'} not found",
                                      hint="install the CUDA toolkit, or pass --nvcc PATH")
    return path


@dataclass(frozen=True)
class CubinBuild:
    """One nvcc build: the cubin on success, nvcc's log (its stderr's tail) on failure."""

    cubin: Path | None
    log: str
    seconds: float


def cached_cubin(compiler: str, source: str, options: Sequence[str], cubin: Path, *,
                 timeout_s: float = TIMEOUT_S) -> CubinBuild:
    """``source`` compiled with ``nvcc -cubin <options>`` to ``cubin`` (a file there already is
    the build: the caller's key names it); written atomically, so a killed compile never
    leaves a half cubin."""
    t0 = time.perf_counter()
    if cubin.exists():
        return CubinBuild(cubin, "", 0.0)
    with tempfile.TemporaryDirectory(dir=cubin.parent) as tmp:
        src = Path(tmp) / "op.cu"
        src.write_text(source)
        out = Path(tmp) / "op.cubin"
        cmd = [compiler, "-cubin", *options, "-o", str(out), str(src)]
        try:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return CubinBuild(None, f"nvcc timed out after {timeout_s} s",
                              time.perf_counter() - t0)
        if proc.returncode != 0:
            return CubinBuild(None, proc.stderr[-4000:], time.perf_counter() - t0)
        os.replace(out, cubin)
    return CubinBuild(cubin, "", time.perf_counter() - t0)


def build_cubins(sources: Mapping[str, tuple[str, Sequence[str]]], cache: Path, *,
                 compiler: str, jobs: int, timeout_s: float = TIMEOUT_S) -> dict[str, CubinBuild]:
    """Each ``key: (source, nvcc options)`` compiled to ``cache/<key>.cubin`` (reused when
    there), ``jobs`` nvcc processes at once; the builds by key."""
    cache.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        built = pool.map(lambda k: cached_cubin(compiler, *sources[k], cache / f"{k}.cubin",
                                                timeout_s=timeout_s), sources)
        return dict(zip(sources, built, strict=True))


def check_cubin(compiler: str, source: str, options: Sequence[str], workdir: Path, name: str, *,
                timeout_s: float = TIMEOUT_S) -> tuple[bool, float, str]:
    """Compile ``source`` with ``nvcc -cubin <options>`` in ``workdir`` (files ``name.cu`` and
    ``name.cubin``): (compiled, seconds of nvcc, its output)."""
    src = workdir / f"{name}.cu"
    src.write_text(source)
    cmd = [compiler, "-cubin", *options, "-o", str(workdir / f"{name}.cubin"), str(src)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, time.perf_counter() - t0, f"nvcc timed out after {timeout_s} s"
    log = (proc.stdout + proc.stderr).strip()
    return proc.returncode == 0, time.perf_counter() - t0, log


def require_toolkit(tools: Sequence[str] = ("nvcc", "ptxas")) -> None:
    """A ConfigError naming the first of ``tools`` not on PATH."""
    for tool in tools:
        if not shutil.which(tool):
            raise ConfigError(f"{tool} is not on PATH", hint="install the CUDA toolkit")


def toolkit_include() -> str:
    """The include directory of the nvcc on PATH (its ``cuda_fp16.h``), else CUDA's usual."""
    nvcc = Path(shutil.which("nvcc") or "nvcc").resolve()
    return next((str(d) for d in (nvcc.parents[1] / "include", Path("/usr/local/cuda/include"))
                 if (d / "cuda_fp16.h").is_file()), "/usr/local/cuda/include")


def nvcc_ptx(source_file: Path, options: Sequence[str], out: Path) -> None:
    """``nvcc -ptx`` of ``source_file`` into ``out`` (a CalledProcessError if it fails)."""
    subprocess.run(["nvcc", "-ptx", *options, "-o", str(out), str(source_file)],
                   capture_output=True, text=True, check=True)


def ptxas_registers(ptx: Path, arch: str) -> dict[str, int]:
    """Registers per entry function, as ``ptxas -v`` reports them for ``arch``."""
    err = subprocess.run(["ptxas", f"-arch={arch}", "-v", str(ptx), "-o", os.devnull],
                         capture_output=True, text=True, check=True).stderr
    out, entry = {}, None
    for line in err.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            entry = m.group(1)
        elif (m := re.search(r"Used (\d+) registers", line)) and entry:
            out[entry] = int(m.group(1))
    return out


# ---- NVRTC in worker processes ---------------------------------------------------------------
def build_jobs() -> int:
    """Workers of :func:`build_in_workers`: ``KERNFORGE_BUILD_JOBS``, else one per usable core
    up to :data:`MAX_JOBS`."""
    env = os.environ.get("KERNFORGE_BUILD_JOBS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_JOBS, cores or 1))


def build_in_workers(todo: Mapping[str, tuple[str, tuple[str, ...]]], jobs: int, work: Work,
                     timeout_s: float) -> dict[str, Result]:
    """``work(source, options)`` for each ``key: (source, options)`` in one pool of spawned
    processes; after a crash or a hang, what is left unfinished is built again in two halves
    (a single source left is the culprit: it fails)."""
    done: dict[str, Result] = {}
    lost: list[str] = []
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=max(1, min(jobs, len(todo))), mp_context=ctx)
    try:
        futures = {k: pool.submit(work, source, options)
                   for k, (source, options) in todo.items()}
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
                done.update(build_in_workers({k: todo[k] for k in part}, jobs, work, timeout_s))
    return done
