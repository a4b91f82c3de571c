"""Compile stencil operators to cubins with the host nvcc, in parallel, cached by source.

The forge compiles a whole round's candidates at once (one nvcc process per source, as many in
parallel as there are cores) before it measures any of them, so device time goes to running
kernels, not to compiling them. The same path is the CPU check in CI: every cell's operator
must compile for sm_90 on a machine without a GPU.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..core import BackendUnavailableError
from ..stencil.operator import Operator

ARCH = "sm_90"


@dataclass(frozen=True)
class Built:
    """One compile: the cubin on success, the compiler's log on failure."""

    op: Operator
    cubin: Path | None
    log: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.cubin is not None


def nvcc() -> str:
    path = shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if path is None:
        raise BackendUnavailableError("nvcc was not found",
                                      hint="install the CUDA toolkit or put nvcc on PATH")
    return path


def _key(op: Operator, arch: str) -> str:
    text = "\0".join((op.source, " ".join(op.options), arch))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _compile_one(op: Operator, cache: Path, arch: str, compiler: str) -> Built:
    import time

    t0 = time.perf_counter()
    key = _key(op, arch)
    cubin = cache / f"{key}.cubin"
    if cubin.exists():
        return Built(op, cubin, "", 0.0)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        src = Path(tmp) / "op.cu"
        src.write_text(op.source)
        out = Path(tmp) / "op.cubin"
        options = [o for o in op.options if o.startswith(("--std", "-std"))]
        cmd = [compiler, f"-arch={arch}", "-cubin", "-lineinfo", *options, "-o", str(out),
               str(src)]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if proc.returncode != 0:
            return Built(op, None, proc.stderr[-4000:], time.perf_counter() - t0)
        os.replace(out, cubin)  # atomic: a killed compile never leaves a half cubin
    return Built(op, cubin, "", time.perf_counter() - t0)


def compile_all(ops: Iterable[Operator], cache: Path, *, arch: str = ARCH,
                jobs: int | None = None) -> list[Built]:
    """Compile every operator (deduplicated by source), results in input order."""
    cache.mkdir(parents=True, exist_ok=True)
    compiler = nvcc()
    ops = list(ops)
    unique: dict[str, Operator] = {}
    for op in ops:
        unique.setdefault(_key(op, arch), op)
    workers = jobs or max(1, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        done = dict(zip(unique, pool.map(lambda o: _compile_one(o, cache, arch, compiler),
                                         unique.values()), strict=True))
    return [Built(op, done[_key(op, arch)].cubin, done[_key(op, arch)].log,
                  done[_key(op, arch)].seconds) for op in ops]
