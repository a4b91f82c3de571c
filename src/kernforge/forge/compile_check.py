"""Compile-only checks of the operator matrix with the host ``nvcc`` (the CPU path for CI).

Every cell's operator (and the naive baseline) is written to a temporary ``.cu`` file and
compiled with ``nvcc -arch=sm_90 -cubin`` and the operator's options (NVRTC-only options are
dropped), in parallel, by the cuda backend (:mod:`kernforge.backends.cuda_build`). Identical
sources with identical options are compiled once.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends import cuda_build
from ..backends.cuda_build import find_nvcc
from ..stencil.kernels import naive
from ..stencil.operator import Operator
from ..stencil.spec import Cell

TIMEOUT_S = cuda_build.TIMEOUT_S
default_jobs = cuda_build.nvcc_jobs  # nvcc's wall time is much outside the CPU: 2x the cores


@dataclass(frozen=True)
class CompileResult:
    cell_id: str
    runner: str  # "ours" or "naive"
    key: str  # the operator's design[params]
    ok: bool
    seconds: float
    log: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell_id, "runner": self.runner, "key": self.key, "ok": self.ok,
                "seconds": self.seconds, "log": self.log}


def nvcc_options(op: Operator, arch: str) -> list[str]:
    """The operator's options for nvcc, with flush-to-zero on as CuPy builds every NVRTC module
    (:func:`kernforge.backends.cuda_build.nvcc_options`)."""
    return cuda_build.nvcc_options(op.options, arch)


def _compile(nvcc: str, op: Operator, arch: str, workdir: Path) -> tuple[bool, float, str]:
    opts = nvcc_options(op, arch)
    digest = hashlib.sha256((op.source + "\0" + " ".join(opts)).encode()).hexdigest()[:20]
    return cuda_build.check_cubin(nvcc, op.source, opts, workdir, digest, timeout_s=TIMEOUT_S)


def _operators(cells: Sequence[Cell], operator_for: Callable[[Cell], Operator],
               include_naive: bool) -> list[tuple[Cell, str, Operator | Exception]]:
    jobs: list[tuple[Cell, str, Operator | Exception]] = []
    for cell in cells:
        try:
            jobs.append((cell, "ours", operator_for(cell)))
        except Exception as exc:  # noqa: BLE001 - a failing generator is reported
            jobs.append((cell, "ours", exc))
        if include_naive:
            jobs.append((cell, "naive", naive.generate(cell)))
    return jobs


def compile_only(cells: Sequence[Cell], operator_for: Callable[[Cell], Operator], *,
                 arch: str = "sm_90", nvcc: str | None = None, jobs: int | None = None,
                 include_naive: bool = True,
                 on_done: Callable[[CompileResult], None] | None = None) -> list[CompileResult]:
    """Compile every cell's operator (and naive) with nvcc; one result per (cell, runner)."""
    exe = find_nvcc(nvcc)
    work = _operators(cells, operator_for, include_naive)
    unique: dict[tuple[str, tuple[str, ...]], Operator] = {}
    for _, _, op in work:
        if isinstance(op, Operator):
            unique.setdefault((op.source, tuple(nvcc_options(op, arch))), op)
    with tempfile.TemporaryDirectory(prefix="kf-stencil-nvcc-") as tmp, \
            ThreadPoolExecutor(max_workers=jobs or default_jobs()) as pool:
        futures = {k: pool.submit(_compile, exe, op, arch, Path(tmp)) for k, op in unique.items()}
        results = []
        for cell, runner, op in work:
            if isinstance(op, Exception):
                res = CompileResult(cell.id, runner, "-", False, 0.0,
                                    f"generator failed: {type(op).__name__}: {op}")
            else:
                ok, secs, log = futures[(op.source, tuple(nvcc_options(op, arch)))].result()
                res = CompileResult(cell.id, runner, op.key, ok, secs, log)
            if on_done:
                on_done(res)
            results.append(res)
    return results
