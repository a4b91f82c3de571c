"""Binding the recorded native units of an nvcc-built program to their CUDA source.

A manifest's ``[integrate] sources`` (with ``includes`` and ``defines``) names the files that
define the program's kernels. At M2's end every native unit without source gets the file that
defines its kernel (a ``__global__`` function of that name, its local headers included): the
file is bound as ``kernforge tune --source`` binds one (:func:`~kernforge.backends.image_build.
bind_source`) and stored in the unit (:func:`~kernforge.record.native_attach.attach_source`).
M3a then lifts the kernel's program from that source first, and M3b builds, tunes and evolves
it like a captured NVRTC program. Whether the file builds the recorded kernel (its mangled
name and parameter layout) is checked where it is built, on the device.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..backends.image_build import bind_source
from ..record.native_attach import attach_source
from ..record.native_format import is_native_unit, read_native
from .lift_includes import kernel_name, kernels_defined, translation_unit
from .manifest import AppManifestError, Integrate


class SourceBindingError(AppManifestError):
    """A recorded kernel that none of the manifest's ``sources`` defines."""


def defined(files: Sequence[Path], includes: Sequence[Path]) -> dict[Path, list[str]]:
    """The ``__global__`` functions each file defines (its local headers included)."""
    return {f: kernels_defined(translation_unit(f, includes)) for f in files}


def file_for(kernel: str, found: dict[Path, list[str]]) -> Path:
    """The first file that defines ``kernel`` (its readable name, or its function's)."""
    name = kernel_name(kernel)
    for f, names in found.items():
        if name in names:
            return f
    listed = "; ".join(f"{f.name}: {', '.join(n) or 'none'}" for f, n in found.items())
    raise SourceBindingError(f"the recorded kernel {name!r} is defined in none of the "
                             f"[integrate] sources (they define {listed})",
                             hint="add the file that defines it to sources (with the includes "
                                  "its headers need), or remove sources")


def bind_units(units: Sequence[Path], integ: Integrate) -> dict[str, str]:
    """Store the defining source in each native unit that has none; per unit, the bound file
    or why none was. Raises :class:`SourceBindingError` when sources are given and no kernel
    is defined in any of them."""
    if not integ.sources:
        return {}
    found = defined(integ.sources, integ.includes)
    out: dict[str, str] = {}
    errors: list[SourceBindingError] = []
    native = [u for u in units if is_native_unit(u)]
    for unit in native:
        rec = read_native(unit)
        if rec.source is not None:
            out[str(unit)] = f"has its own source ({rec.source.origin})"
            continue
        try:
            f = file_for(rec.name, found)
        except SourceBindingError as exc:
            errors.append(exc)
            out[str(unit)] = exc.message
            continue
        attach_source(unit, bind_source(f, includes=[str(i) for i in integ.includes],
                                        defines=integ.defines))
        out[str(unit)] = f"bound to {f}"
    if errors and len(errors) == len(native):
        raise errors[0]
    return out
