"""NVRTC through ctypes, and the cuda backend's knobs as NVRTC options.

Native units whose kernel the recorded program compiled with NVRTC carry its source; tuning
compiles that source again here (no CuPy needed: the replay of native units runs on the driver
API through ctypes, in CI against the fake driver and the fake NVRTC of
``kernforge.testing.fakecuda``). The library is, in order: the one given (the libnvrtc the
recorded program used), ``$KERNFORGE_LIBNVRTC``, then ``libnvrtc.so`` and its usual sonames.
"""

from __future__ import annotations

import ctypes as C
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import BackendUnavailableError, CompileError

SONAMES = ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2")


def knob_flags(o: Mapping[str, Any], defines: Iterable[tuple[str, Any]] = ()) -> tuple[str, ...]:
    """NVRTC options for the cuda backend's knob values ``o`` (every knob present, defaults
    resolved): what ``CudaBackend.nvrtc_options`` passes, and what native source builds add."""
    opts = [f"-D{k}={v}" for k, v in defines]
    if o["maxrregcount"]:
        opts.append(f"--maxrregcount={o['maxrregcount']}")
    for knob, flag, default in (("ftz", "--ftz", False), ("prec_div", "--prec-div", True),
                                ("prec_sqrt", "--prec-sqrt", True), ("fmad", "--fmad", True)):
        if o[knob] != default:  # NVRTC's default: no flag (so --use_fast_math implies them)
            opts.append(f"{flag}={'true' if o[knob] else 'false'}")
    if o["use_fast_math"]:
        opts.append("--use_fast_math")
    if o["extra_device_vectorization"]:
        opts.append("--extra-device-vectorization")
    if o["dopt"] != "default":
        opts.append(f"-dopt={o['dopt']}")
    ptxas = []
    if o["ptxas_opt"] != 3:
        ptxas.append(f"-O{o['ptxas_opt']}")
    if o["ptxas_dlcm"] != "default":
        ptxas.append(f"-dlcm={o['ptxas_dlcm']}")
    if o["ptxas_dscm"] != "default":
        ptxas.append(f"-dscm={o['ptxas_dscm']}")
    if ptxas:
        opts.append("--ptxas-options=" + ",".join(ptxas))
    opts.extend(shlex.split(str(o["extra_options"])))
    return tuple(opts)


@dataclass(frozen=True)
class NvrtcOutput:
    image: bytes  # the cubin, or the PTX text with its NUL
    kind: str  # cubin | ptx
    lowered: Mapping[str, str]  # name expression -> lowered (mangled) name
    log: str
    library: str


def _load(library: str | None) -> tuple[C.CDLL, str]:
    tried = []
    for name in (library, os.environ.get("KERNFORGE_LIBNVRTC"), *SONAMES):
        if not name or name in tried:
            continue
        tried.append(name)
        try:
            return C.CDLL(name), name
        except OSError:
            continue
    raise BackendUnavailableError(f"no NVRTC library could be loaded (tried {', '.join(tried)})",
                                  hint="install the CUDA toolkit's NVRTC (libnvrtc.so) or set "
                                       "KERNFORGE_LIBNVRTC to its path")


def _strings(items: Sequence[str]) -> Any:
    return (C.c_char_p * max(len(items), 1))(*[s.encode() for s in items])


def compile_program(code: str, *, name: str = "kernel.cu", options: Sequence[str] = (),
                    headers: Sequence[tuple[str, str]] = (), name_expressions: Sequence[str] = (),
                    output: str = "cubin", library: str | None = None) -> NvrtcOutput:
    """Compile ``code`` with NVRTC; the image (``output``: cubin or ptx) and the lowered names
    of ``name_expressions``. A compile error is a :class:`CompileError` carrying NVRTC's log."""
    lib, path = _load(library)
    prog = C.c_void_p()

    def check(rc: int, what: str) -> None:
        if rc:
            lib.nvrtcGetErrorString.restype = C.c_char_p
            err = (lib.nvrtcGetErrorString(rc) or b"").decode(errors="replace")
            raise CompileError(f"{what} failed: {err or rc}", log=log())

    def log() -> str:
        n = C.c_size_t()
        if not prog.value or lib.nvrtcGetProgramLogSize(prog, C.byref(n)):
            return ""
        buf = C.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, buf)
        return buf.value.decode(errors="replace")

    check(lib.nvrtcCreateProgram(C.byref(prog), code.encode(), name.encode(), len(headers),
                                 _strings([h[1] for h in headers]),
                                 _strings([h[0] for h in headers])), "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            check(lib.nvrtcAddNameExpression(prog, expr.encode()), "nvrtcAddNameExpression")
        rc = lib.nvrtcCompileProgram(prog, len(options), _strings(list(options)))
        if rc:
            text = log()
            first = "\n".join(text.strip().splitlines()[:8])
            raise CompileError(f"NVRTC could not compile {name}:\n{first}", log=text)
        lowered = {}
        for expr in name_expressions:
            low = C.c_char_p()
            check(lib.nvrtcGetLoweredName(prog, expr.encode(), C.byref(low)),
                  "nvrtcGetLoweredName")
            lowered[expr] = (low.value or b"").decode()
        get, size = ("nvrtcGetPTX", "nvrtcGetPTXSize") if output == "ptx" else \
            ("nvrtcGetCUBIN", "nvrtcGetCUBINSize")
        n = C.c_size_t()
        check(getattr(lib, size)(prog, C.byref(n)), size)
        buf = C.create_string_buffer(n.value)
        check(getattr(lib, get)(prog, buf), get)
        return NvrtcOutput(buf.raw[:n.value], output, lowered, log(), path)
    finally:
        lib.nvrtcDestroyProgram(C.byref(prog))
