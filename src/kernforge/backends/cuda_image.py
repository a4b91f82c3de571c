"""CUDA images built from generated source for the driver to load: the adapters and operators
of application matching (apps/adapter.py, apps/fused.py, apps/program_adapter.py), built by
nvcc when the toolkit is installed, else by NVRTC through CuPy. Only the backends build and
load CUDA (tests/backends/test_cuda_only_in_backends.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..core import CompileError


def _tail(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    cand = Path(home) / "bin" / "nvcc"
    return str(cand) if cand.is_file() else None


def compile_cubin(source: str, arch: str = "sm_90", *, ptx: bool = False) -> bytes:
    """``source`` compiled by nvcc (``-cubin``, or ``-ptx``) for ``arch``; a CompileError with
    the compiler's log when it fails, or when no nvcc is found."""
    exe = nvcc()
    if exe is None:
        raise CompileError("nvcc not found", hint="put the CUDA toolkit's bin on PATH or set "
                           "CUDA_HOME")
    with tempfile.TemporaryDirectory(prefix="kf-adapter-") as tmp:
        src, out = Path(tmp) / "adapter.cu", Path(tmp) / ("adapter.ptx" if ptx else "a.cubin")
        src.write_text(source)
        cmd = [exe, "-ptx" if ptx else "-cubin", f"-arch={arch}", "-O3", "--std=c++17",
               "-o", str(out), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed on the adapter: {_tail(proc.stderr, 2000)}",
                               hint="the generated adapter is a bug: report it with the unit")
        return out.read_bytes()


def compile_image(source: str, arch: str) -> bytes:
    """The adapter's module image for ``arch`` (``sm_90``): a cubin from nvcc when there is
    one, else NVRTC's output through CuPy (the compiler dispatch uses); a CompileError when
    neither is available or the source does not compile."""
    if nvcc() is not None:
        return compile_cubin(source, arch)
    try:
        from cupy.cuda import compiler  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        raise CompileError("neither nvcc nor CuPy's NVRTC is available to build the adapter",
                           hint="install the CUDA toolkit or cupy-cuda12x") from None
    try:
        image = compiler.compile_using_nvrtc(source, ("--std=c++17",),
                                             arch=arch.removeprefix("sm_"))
    except compiler.CompileException as exc:  # it carries the log
        raise CompileError(f"NVRTC failed on the adapter: {_tail(str(exc), 2000)}",
                           hint="the generated adapter is a bug: report it with the unit") from None
    return image if isinstance(image, bytes) else str(image).encode()


def compile_images(sources: list[str], arch: str, workers: int | None = None
                   ) -> list[bytes | CompileError]:
    """Every source's image (:func:`compile_image`), or the CompileError that refused it, in
    order: with nvcc, compiled in parallel (``workers`` processes of nvcc at a time, default
    one per CPU), since candidates are built before any is checked; NVRTC builds them one by
    one."""
    def one(source: str) -> bytes | CompileError:
        try:
            return compile_image(source, arch)
        except CompileError as exc:
            return exc

    if len(sources) < 2 or nvcc() is None:
        return [one(s) for s in sources]
    n = max(1, min(len(sources), workers or os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=n) as pool:  # each waits on its nvcc process
        return list(pool.map(one, sources))
