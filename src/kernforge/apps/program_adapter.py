"""The adapter that puts a lifted program's generated operator in place of a recorded kernel.

The driver interposer calls the replacement with the *original* parameter buffer
(record/native/kf_deploy.c), so the adapter is one ``extern "C" __global__`` function with the
recorded kernel's exact layout (as :mod:`.adapter` does for matrix operators): every pointer
parameter an untyped pointer, each scalar parameter the program reads typed (``float`` or
``double``), every other parameter a placeholder of its size and alignment. Its body calls
the design's ``kf_body`` (:mod:`kernforge.stencil.program.codegen`) with each field's grid at
its place in its buffer (a padded volume, the k-th grid of a buffer), each reduction's scalar,
each scalar parameter and each coefficient table. The launch is the design's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from ..core import ConfigError
from ..stencil.program.binding import Binding
from ..stencil.program.codegen import CTYPE, Kernel
from ..stencil.program.model import StencilProgram
from .adapter import SCALARS, Slot, _align, check_layout


@dataclass(frozen=True)
class ProgramAdapter:
    """The adapter's source, entry and launch, and the operator it wraps."""

    source: str
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    kernel: Kernel


def program_adapter(k: Kernel, p: StencilProgram, b: Binding, slots: Sequence[Slot],
                    total: int) -> ProgramAdapter:
    """The adapter running ``k`` (generated for ``p`` bound by ``b``) in place of the kernel
    whose parameters are ``slots`` (``total`` bytes); a ConfigError when the binding names a
    parameter the layout does not have as it needs (a pointer, a float or double)."""
    for i in b.params():
        if i >= len(slots):
            raise ConfigError(f"the binding names parameter {i}, the kernel has {len(slots)}",
                              hint="the lifted program belongs to another kernel")
    pointers = {pl.param for pl in b.fields.values()} | set(b.reductions.values()) \
        | set(b.tables.values())
    for i in sorted(pointers):
        if not slots[i].pointer:
            raise ConfigError(f"parameter {i} holds a grid or scalar result but is no plain "
                              "device pointer in the recording",
                              hint="a pointer inside a struct is not followed")
    for i, ctype in b.scalars.items():
        if slots[i].pointer or {"float": 4, "double": 8}[ctype] != slots[i].size:
            raise ConfigError(f"parameter {i} is read as a {ctype} but takes {slots[i].size} "
                              "bytes", hint="the lifted program belongs to another kernel")
    check_layout(slots, total)
    decls, structs = [], []
    for i, s in enumerate(slots):
        if s.pointer:
            decls.append(f"void* kf_p{i}")
        elif i in b.scalars:
            decls.append(f"{b.scalars[i]} kf_p{i}")
        elif s.size in SCALARS:
            decls.append(f"{SCALARS[s.size]} kf_p{i}")
        else:
            structs.append(f"struct __align__({_align(s.offset, s.size)}) kf_blob{i} "
                           f"{{ unsigned char b[{s.size}]; }};\n")
            decls.append(f"kf_blob{i} kf_p{i}")
    t = CTYPE[p.precision]
    call = []
    for a in k.args:
        if a.kind == "field":
            pl = b.fields[a.name]
            const = "" if a.name in p.names("out", "inout") else "const "
            call.append(f"(({const}{t}*)kf_p{pl.param} + {pl.offset}L)")
        elif a.kind == "reduction":
            call.append(f"(({t}*)kf_p{b.reductions[a.name]})")
        elif a.kind == "scalar":
            call.append(f"kf_p{a.name}")
        else:
            call.append(f"((const {t}*)kf_p{b.tables[a.name]})")
    params = ", ".join(decls)
    threads = k.block[0] * k.block[1] * k.block[2]
    digest = hashlib.sha256((k.source + params + ",".join(call)).encode()).hexdigest()[:12]
    entry = f"kf_lifted_{digest}"
    source = (f"// kernforge lifted-program adapter: operator {k.key}\n{k.source}\n{''.join(structs)}"
              f"extern \"C\" __global__ void __launch_bounds__({threads}) {entry}({params}) {{\n"
              f"  kf_body({', '.join(call)});\n}}\n")
    return ProgramAdapter(source, entry, k.grid, k.block, k.shared_bytes, k)
