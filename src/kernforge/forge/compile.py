"""Compile stencil operators to cubins with the host nvcc, in parallel, cached by source.

The forge compiles a whole round's candidates at once (one nvcc process per source, as many in
parallel as there are cores) before it measures any of them, so device time goes to running
kernels, not to compiling them. The builds are the cuda backend's
(:func:`kernforge.backends.cuda_build.build_cubins`); the options are those of
:mod:`kernforge.forge.compile_check` (the CPU check CI runs), with ``-lineinfo``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..backends.cuda_build import build_cubins, find_nvcc, nvcc_jobs
from ..stencil.operator import Operator
from .compile_check import nvcc_options

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


def compile_all(ops: Iterable[Operator], cache: Path, *, arch: str = ARCH,
                jobs: int | None = None) -> list[Built]:
    """Compile every operator (deduplicated by source), results in input order."""
    cache.mkdir(parents=True, exist_ok=True)
    compiler = find_nvcc()
    ops = list(ops)
    unique: dict[str, Operator] = {}
    for op in ops:
        unique.setdefault(_key(op, arch), op)
    done = build_cubins({k: (op.source, ["-lineinfo", *nvcc_options(op, arch)])
                         for k, op in unique.items()}, cache, compiler=compiler,
                        jobs=jobs or nvcc_jobs())
    return [Built(op, done[_key(op, arch)].cubin, done[_key(op, arch)].log,
                  done[_key(op, arch)].seconds) for op in ops]
