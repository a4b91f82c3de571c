"""Module images built for a native unit's candidates, and binding a source file to a unit.

A native unit whose kernel the program compiled with NVRTC carries the source (recorded by the
interposer); a unit of an nvcc-built program gets one bound by ``--source FILE.cu``. A
:class:`NativeBuild` compiles that source again -- the cuda backend's knobs (maxrregcount,
fast-math flags, extra vectorization, load/store cache modifiers, ``__launch_bounds__``) and
``-D`` defines over its own options, or an evolved source -- or takes the PTX inside the
recorded fatbin for the JIT. Images are cached on disk by what went into them, so a winner's
image can be exported for deployment byte for byte.

A built kernel must be the recorded one: the image must define the recorded (mangled) entry and
its parameters must have the recorded sizes and offsets (``cuFuncGetParamInfo``); otherwise
:class:`BindingError` says which, and why.
"""

from __future__ import annotations

import ctypes as C
import hashlib
import json
import os
import struct
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core import ConfigError, KernelSource, LaunchError
from ..core.native import NativeBuild, NativeRecording, NativeSource
from ..core.paths import cache_folder
from . import fatbin, nvcc
from .cuda import KNOBS
from .cxx_names import parse_name_expression, short_name
from .driver import Driver
from .nvrtc import compile_program, knob_flags
from .rewrite import rewrite
from .signature import parse_signature

DEFAULTS: dict[str, Any] = {k.name: k.default for k in KNOBS}
# the options of the recorded compile that a knob, when given, replaces
_REPLACES: Mapping[str, tuple[str, ...]] = {
    "maxrregcount": ("--maxrregcount", "-maxrregcount"),
    "use_fast_math": ("--use_fast_math", "-use_fast_math"),
    "ftz": ("--ftz", "-ftz"), "prec_div": ("--prec-div", "-prec-div"),
    "prec_sqrt": ("--prec-sqrt", "-prec-sqrt"), "fmad": ("--fmad", "-fmad"),
    "extra_device_vectorization": ("--extra-device-vectorization",),
    "dopt": ("-dopt", "--dopt"), "ptxas_opt": ("--ptxas-options", "-Xptxas"),
    "ptxas_dlcm": ("--ptxas-options", "-Xptxas"), "ptxas_dscm": ("--ptxas-options", "-Xptxas"),
}
_REWRITES = ("launch_bounds_max", "launch_bounds_min_blocks")


class BindingError(ConfigError):
    """A source built for a native unit is not the recorded kernel (entry or parameters)."""


def options_for(src: NativeSource, build: NativeBuild) -> tuple[str, ...]:
    """The source's own options without those the build's knobs replace, then the knobs'."""
    knobs = {k: v for k, v in build.knobs if k not in _REWRITES}
    unknown = sorted(set(knobs) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown compile knob(s) {', '.join(unknown)}",
                          hint=f"use the cuda backend's: {', '.join(DEFAULTS)}")
    drop = tuple(p for k in knobs for p in _REPLACES.get(k, ()))
    kept = [o for o in src.options if not o.startswith(drop)] if drop else list(src.options)
    return (*kept, *knob_flags({**DEFAULTS, **knobs}, build.defines))


def entry_name(rec: NativeRecording, src: NativeSource) -> str:
    """The kernel's name in the source (the base name of its name expression or symbol)."""
    if src.name_expression:
        return parse_name_expression(src.name_expression).entry
    return short_name(rec.entry).split("::")[-1]


def _code(rec: NativeRecording, src: NativeSource, build: NativeBuild) -> str:
    code = build.code if build.code is not None else src.code
    knobs = dict(build.knobs)
    lb = int(knobs.get("launch_bounds_max") or 0)
    if not lb:
        return code
    ks = KernelSource(code, entry_name(rec, src), language="cuda")
    try:
        sig = parse_signature(ks)
    except ConfigError:
        sig = ()
    return rewrite(ks, sig, launch_bounds=(lb, int(knobs.get("launch_bounds_min_blocks") or 0)))


def _arch(cc: tuple[int, int]) -> str:
    return f"sm_{cc[0]}{cc[1]}"


def _compile(rec: NativeRecording, build: NativeBuild, cc: tuple[int, int]) -> bytes:
    if build.kind == "ptx":
        ptx = fatbin.ptx_for(rec.image_bytes(), cc)
        if ptx is None:
            raise ConfigError(f"the image of {rec.name} holds no PTX for {_arch(cc)}",
                              hint="JIT options apply to images with PTX (nvcc embeds it "
                                   "with -arch=sm_XX, not with -gencode ...,code=sm_XX only)")
        return ptx
    src = build.source
    assert src is not None
    code, opts = _code(rec, src, build), options_for(src, build)
    if src.origin == "nvcc":
        return nvcc.cubin(Path(src.program), arch=_arch(cc), options=opts,
                          code=None if code == Path(src.program).read_text("utf-8") else code)
    exprs = [src.name_expression] if src.name_expression else []
    out = compile_program(code, name=src.program or "kernel.cu", options=opts,
                          headers=src.headers, name_expressions=exprs, output=src.output,
                          library=src.library if src.library and Path(src.library).exists()
                          else None)
    if exprs and out.lowered.get(exprs[0]) != rec.entry:
        raise BindingError(f"{exprs[0]} now lowers to {out.lowered.get(exprs[0])!r}, not the "
                           f"recorded {rec.entry!r}", hint="keep the kernel's signature and "
                                                           "template arguments as recorded")
    return out.image


def build_image(rec: NativeRecording, build: NativeBuild, cc: tuple[int, int]) -> bytes:
    """The image ``build`` makes for ``rec`` on a device of compute capability ``cc``."""
    key = hashlib.sha256(json.dumps([build.to_json(), rec.image, list(cc)],
                                    sort_keys=True).encode()).hexdigest()
    path = cache_folder("native-builds") / key[:2] / f"{key}.bin"
    if build.source is not None and build.source.origin == "nvcc":
        path = path.with_suffix(f".{_mtime(build.source)}.bin")  # the file may change
    if path.is_file():
        return path.read_bytes()
    image = _compile(rec, build, cc)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{uuid.uuid4().hex}.tmp")
    tmp.write_bytes(image)
    os.replace(tmp, path)
    return image


def _mtime(src: NativeSource) -> int:
    try:
        return int(Path(src.program).stat().st_mtime_ns)
    except OSError:
        return 0


def bind_source(path: Path, *, includes: Sequence[str] = (), defines: Sequence[str] = (),
                options: Sequence[str] = ()) -> NativeSource:
    """A CUDA file bound to recorded kernels (``--source``): compiled standalone with nvcc,
    ``-I`` includes and ``-D`` defines (``NAME`` or ``NAME=VALUE``) and further options."""
    if not path.is_file():
        raise ConfigError(f"--source {path}: no such file", hint="give the kernel's .cu file")
    for d in defines:
        if not d.split("=", 1)[0].isidentifier():
            raise ConfigError(f"-D {d!r} is not NAME or NAME=VALUE")
    opts = (*[f"-I{Path(i).resolve()}" for i in includes], *[f"-D{d}" for d in defines],
            *options)
    return NativeSource("nvcc", path.read_text("utf-8", errors="replace"), opts,
                        program=str(path.resolve()))


def elf_functions(image: bytes) -> list[str]:
    """The function symbols of a cubin (ELF64), to name what a bound file defines."""
    if image[:4] != b"\x7fELF" or image[4] != 2:
        return []
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
    sections = [struct.unpack_from("<IIQQQQII", image, shoff + i * shentsize)
                for i in range(shnum)]
    out = []
    for _, stype, _, _, off, size, link, _ in sections:
        if stype != 2:  # SHT_SYMTAB
            continue
        stroff = sections[link][4]
        for k in range(off, off + size, 24):
            name, info = struct.unpack_from("<IB", image, k)
            if info & 0xF == 2:  # STT_FUNC
                end = image.index(b"\0", stroff + name)
                out.append(image[stroff + name:end].decode(errors="replace"))
    return out


def _fmt(params: list[tuple[int, int]]) -> str:
    return ", ".join(f"{s}@{o}" for o, s in params) or "none"


def check_layout(lib: Any, fn: Any, rec: NativeRecording) -> None:
    """The built function's parameters (``cuFuncGetParamInfo``) against the recorded layout;
    skipped where the driver cannot say (drivers before 12.4)."""
    got: list[tuple[int, int]] = []
    off, size = C.c_size_t(), C.c_size_t()
    info = getattr(lib, "cuFuncGetParamInfo", None)
    if info is None:
        return
    while True:
        rc = info(fn, len(got), C.byref(off), C.byref(size))
        if rc == 1:  # CUDA_ERROR_INVALID_VALUE: past the last parameter
            break
        if rc:
            return
        got.append((off.value, size.value))
    want = [(p.offset, p.size) for p in rec.params]
    single = len(want) == 1 and want[0] == (0, len(rec.param_bytes))  # an `extra` buffer
    if got != want and not (single and got and got[-1][0] + got[-1][1]
                            == len(rec.param_bytes)):
        raise BindingError(f"the built {rec.name} takes parameters (size@offset) {_fmt(got)}; "
                           f"the recorded launch passed {_fmt(want)}",
                           hint="bind the source the program was built from, with its -D/-I "
                                "options: the parameters must be the same types in the same "
                                "order")


def load_kernel(drv: Driver, rec: NativeRecording, build: NativeBuild | None, *,
                jit: Mapping[str, int] | None = None, carveout: int | None = None,
                image: bytes | None = None) -> Any:
    """The recorded kernel's function, loaded with the JIT options ``jit``, the function
    attributes the program set (and the dynamic shared memory its launches need) and then the
    shared-memory ``carveout``: from the recorded image (``build`` None; ``image``: its bytes, when the
    caller holds them) or from the one ``build`` makes, checked to be the recorded kernel
    (its entry and parameter layout; else a :class:`BindingError` naming what it defines)."""
    if build is None:
        fn = drv.function(drv.load(rec.image_bytes() if image is None else image,
                                   dict(jit or {})), rec.entry)
    else:
        built = build_image(rec, build, (drv.attribute("cc_major"), drv.attribute("cc_minor")))
        mod = drv.load(built, dict(jit or {}))
        try:
            fn = drv.function(mod, rec.entry)
        except LaunchError:
            names = [n for n in elf_functions(built) if n.startswith("_Z") or "(" not in n]
            raise BindingError(f"the built image does not define the recorded kernel "
                               f"{rec.entry}" + (f" (it defines {', '.join(names[:8])})"
                                                 if names else ""),
                               hint="bind the file that defines the kernel, with the same "
                                    "name, namespace and parameter types") from None
        check_layout(drv.lib, fn, rec)
    shared = max([rec.shared_mem] + [s.shared_mem for s in rec.steps if rec.of_kernel(s)])
    drv.set_func_attrs(fn, rec.func_attrs, shared)
    if carveout is not None:
        drv.set_carveout(fn, carveout)
    return fn
