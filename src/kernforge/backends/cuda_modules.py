"""CUDA modules the forge and the stencil matrix load through CuPy: from source (NVRTC, as
dispatch loads them), from a cubin, or only compiled (to fill CuPy's kernel cache), and their
functions by entry name; and NVRTC's PTX through ctypes for the registers audit.

Source modules are CuPy's own ``RawModule`` (:func:`.cupy_hooks.original_class`), never the
recording hooks' subclass: the forge's kernels are not a recorded program's. ``cp`` is the
CuPy module the caller got (:func:`.cuda.require_cupy`, with its own words for who needs it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core import CompileError, ConfigError, LaunchError
from .cupy_hooks import original_class


def source_module(cp: Any, code: str, *, options: Sequence[str] | None = None,
                  name_expressions: Sequence[str] | None = None) -> Any:
    """CuPy's ``RawModule`` over ``code``, with the ``options`` and ``name_expressions``
    given (CuPy's defaults for those left out); compiled when a function is first asked."""
    kw: dict[str, Any] = {}
    if options is not None:
        kw["options"] = options
    if name_expressions is not None:
        kw["name_expressions"] = name_expressions
    return original_class(cp, "RawModule")(code=code, **kw)


def compile_module(cp: Any, code: str, options: tuple[str, ...]) -> None:
    """Compile ``code`` with NVRTC as :func:`load_source` does, into CuPy's kernel cache
    (``CUPY_CACHE_DIR``), without loading it; CuPy's exception when it does not compile."""
    source_module(cp, code, options=options).compile()


def load_source(cp: Any, code: str, options: Sequence[str], entries: Sequence[str], *,
                what: str) -> dict[str, Any]:
    """The ``entries`` of ``code`` compiled with NVRTC and loaded; a compiler error (its log
    kept), an invalid option, a module the driver refuses or a missing entry is a
    :class:`CompileError` naming ``what``."""
    try:
        module = source_module(cp, code, options=tuple(options))
        return {entry: module.get_function(entry) for entry in entries}
    except cp.cuda.compiler.CompileException as exc:
        log = str(exc)
        first = "\n".join(log.strip().splitlines()[:8])
        raise CompileError(f"NVRTC could not compile {what}:\n{first}", log=log) from exc
    except Exception as exc:  # invalid option, module load failure, missing entry
        raise CompileError(f"could not build {what}: {type(exc).__name__}: {exc}",
                           log=str(exc)) from exc


def load_image(cp: Any, path: Path, entries: Sequence[str], *, what: str) -> dict[str, Any]:
    """The ``entries`` of the cubin at ``path``; one the driver refuses (built by a newer nvcc
    than the driver knows, a missing entry) is a :class:`LaunchError` naming ``what``."""
    try:
        module = cp.RawModule(path=str(path))
        return {entry: module.get_function(entry) for entry in entries}
    except cp.cuda.driver.CUDADriverError as exc:
        raise LaunchError(f"{what}: the driver refused its cubin: {exc}",
                          hint="rebuild it with the device's nvcc (clear the cubin cache)"
                          ) from exc


def find_nvrtc(given: str | None) -> Path:
    """libnvrtc: ``given`` (``--nvrtc``), $KERNFORGE_NVRTC, the nvidia-cuda-nvrtc wheel, the
    system's."""
    if given:
        if not Path(given).is_file():
            raise ConfigError(f"--nvrtc {given}: no such file", hint="a libnvrtc.so.13")
        return Path(given)
    cands = [os.environ.get("KERNFORGE_NVRTC")]
    for site in sys.path:
        for sub in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"):
            cands += [str(p) for p in sorted(Path(site, sub).glob("libnvrtc.so*"))
                      if "builtins" not in p.name and "alt" not in p.name]
    cands.append(ctypes.util.find_library("nvrtc"))
    for c in cands:
        if c and Path(c).is_file():
            return Path(c)
    raise ConfigError("libnvrtc not found", hint="pip install 'nvidia-cuda-nvrtc==13.0.*', or "
                      "pass --nvrtc /path/to/libnvrtc.so.13")


class NvrtcPtx:
    """NVRTC from the library at ``path`` (its builtins loaded first from beside it), for PTX
    of a source; no GPU needed."""

    def __init__(self, path: Path) -> None:
        for b in sorted(path.parent.glob("libnvrtc-builtins.so*")):  # NVRTC dlopens it by name
            if "alt" not in b.name:
                ctypes.CDLL(str(b), mode=ctypes.RTLD_GLOBAL)
        self.lib = ctypes.CDLL(str(path))

    def ptx(self, source: str, options: list[str]) -> str:
        """The PTX of ``source``; a RuntimeError with NVRTC's log when it does not compile."""
        lib, prog = self.lib, ctypes.c_void_p()
        lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"op.cu", 0, None, None)
        try:
            arr = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            if lib.nvrtcCompileProgram(prog, len(options), arr) != 0:
                n = ctypes.c_size_t()
                lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
                log = ctypes.create_string_buffer(n.value)
                lib.nvrtcGetProgramLog(prog, log)
                raise RuntimeError(log.value.decode(errors="replace")[:2000])
            n = ctypes.c_size_t()
            lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
            buf = ctypes.create_string_buffer(n.value)
            lib.nvrtcGetPTX(prog, buf)
            return buf.value.decode()
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))
