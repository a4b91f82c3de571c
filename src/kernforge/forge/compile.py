"""Compile stencil operators to cubins with the host nvcc, in parallel, cached by source.

The forge compiles a whole round's candidates at once (one nvcc process per source, as many in
parallel as there are cores) before it measures any of them, so device time goes to running
kernels, not to compiling them. Options, the nvcc lookup and the time limit are
those of :mod:`kernforge.forge.compile_check` (the CPU check CI runs).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..stencil.operator import Operator
from .compile_check import TIMEOUT_S, default_jobs, find_nvcc, nvcc_options

ARCH = "sm_90"


@dataclass(frozen=True)
class Built:
    """One compile: the cubin on success (or ``deployed``: built by :mod:`.nvrtc` as dispatch
    builds it, found in CuPy's kernel cache by :func:`.measure.load`), the compiler's log on
    failure."""

    op: Operator
    cubin: Path | None
    log: str
    seconds: float
    deployed: bool = False

    @property
    def ok(self) -> bool:
        return self.cubin is not None or self.deployed


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
        cmd = [compiler, "-cubin", "-lineinfo", *nvcc_options(op, arch), "-o", str(out),
               str(src)]
        try:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True,
                                  timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return Built(op, None, f"nvcc timed out after {TIMEOUT_S} s",
                         time.perf_counter() - t0)
        if proc.returncode != 0:
            return Built(op, None, proc.stderr[-4000:], time.perf_counter() - t0)
        os.replace(out, cubin)  # atomic: a killed compile never leaves a half cubin
    return Built(op, cubin, "", time.perf_counter() - t0)


def compile_all(ops: Iterable[Operator], cache: Path, *, arch: str = ARCH,
                jobs: int | None = None) -> list[Built]:
    """Compile every operator (deduplicated by source), results in input order."""
    cache.mkdir(parents=True, exist_ok=True)
    compiler = find_nvcc()
    ops = list(ops)
    unique: dict[str, Operator] = {}
    for op in ops:
        unique.setdefault(_key(op, arch), op)
    workers = jobs or default_jobs()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        done = dict(zip(unique, pool.map(lambda o: _compile_one(o, cache, arch, compiler),
                                         unique.values()), strict=True))
    return [Built(op, done[_key(op, arch)].cubin, done[_key(op, arch)].log,
                  done[_key(op, arch)].seconds) for op in ops]
