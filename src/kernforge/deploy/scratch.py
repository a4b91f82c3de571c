"""Parameter bytes that a kernel writes before it reads them: left out of the problem key.

A deployed entry replaces a launch only when the launch's parameter bytes equal the recorded
ones outside pointers (:func:`kernforge.deploy.native.problem_key`). Some frameworks pass
by-value structs part of which the host never fills. CuPy's elementwise, reduction and cupyx
kernels take a ``CIndexer<ndim, ...>``: an element count, ``ndim`` extents and ``ndim`` index
slots. The host fills the count and the extents; the index slots hold whatever the host memory
held (they differ from run to run of the same program), and the kernel's ``set(i)`` writes them
before ``get()`` reads them. A key that compared them would match in no run but the recorded
one, so every launch would fall back.

The parameter's type is read from the source that the program compiled with NVRTC (the
recording keeps it), only when that source includes CuPy's ``cupy/carray.cuh`` (another
``CIndexer`` is not CuPy's) and the parameter is passed by value under a plain name; its layout
from the parameter's size: ``(1 + 2 * ndim)`` words of equal width, the index slots last.
Without captured source, or when the size does not fit that layout, nothing is left out.
"""

from __future__ import annotations

import re

from ..backends.signature import QUALIFIERS, entry_declarator
from ..core.native import NativeRecording
from ..syntax import parse, text

_CINDEXER = re.compile(r"^CIndexer\s*<\s*(\d+)\s*(?:,[^<>]*)?>$")


def param_types(code: str, entry: str) -> list[str] | None:
    """The type of each parameter of ``entry`` in ``code``, qualifiers dropped; None when the
    entry is not declared there (a templated kernel found by a name expression, for one)."""
    try:
        _, root = parse(code, "cuda")
    except Exception:  # noqa: BLE001 - an unreadable source leaves nothing out
        return None
    decl = entry_declarator(root, entry)
    if decl is None:
        return None
    out = []
    for c in decl.child_by_field_name("parameters").named_children:
        if c.type != "parameter_declaration":
            continue
        typ, name = c.child_by_field_name("type"), c.child_by_field_name("declarator")
        if typ is None or name is None or name.type != "identifier":  # a pointer, a reference
            out.append("")
            continue
        out.append(" ".join(w for w in text(typ).split() if w not in QUALIFIERS))
    return out


def scratch_ranges(rec: NativeRecording) -> tuple[tuple[int, int], ...]:
    """(offset, size) of every byte range of the parameter buffer that the kernel overwrites
    before reading it (the index slots of a CuPy ``CIndexer``); empty when none is known."""
    if rec.source is None or not rec.params or "cupy/carray.cuh" not in rec.source.code:
        return ()
    types = param_types(rec.source.code, rec.entry)
    if types is None or len(types) != len(rec.params):
        return ()
    out = []
    for typ, p in zip(types, rec.params):
        m = _CINDEXER.match(typ)
        if m is None:
            continue
        ndim = int(m.group(1))
        if ndim == 0 or p.size % (1 + 2 * ndim):
            continue
        width = p.size // (1 + 2 * ndim)
        out.append((p.offset + (1 + ndim) * width, ndim * width))
    return tuple(out)
