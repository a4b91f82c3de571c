"""What the cuda backend searches: block shapes, and whether a kernel's block may change."""

from __future__ import annotations

import re
from dataclasses import replace

from ..core import LaunchConfig, Variant
from .signature import _parser, _text, _walk

_STATIC_SHARED = re.compile(r"(extern\s+)?__shared__\s[^;]*?\[\s*[^\]\s]")


def block_is_tunable(code: str, entry: str | None = None) -> bool:
    """False when a statically sized ``__shared__`` array is declared where the kernel runs:
    such kernels usually assume their block size (a reduction over ``s[BLOCK]``), and another
    block writes out of bounds -- a crash, not a wrong result. With ``entry``, only the entry's
    body and the functions it calls by name are looked at (a module often holds several
    kernels); ``extern __shared__ T s[]`` is fine."""
    scope = code if entry is None else _entry_scope(code, entry)
    return all(m.group(1) for m in _STATIC_SHARED.finditer(scope))


def _entry_scope(code: str, entry: str) -> str:
    """The text of the entry's definition and of the functions it names, or all of ``code``
    when the entry's definition cannot be found."""
    root = _parser("cuda").parse(code.encode()).root_node
    defs: dict[str, str] = {}
    for n in _walk(root):
        if n.type == "function_definition":
            decl = next((c for c in n.children if c.type == "function_declarator"), None)
            ident = decl.child_by_field_name("declarator") if decl is not None else None
            if ident is not None:
                defs.setdefault(_text(ident), _text(n))
    if entry not in defs:
        return code
    body = defs[entry]
    called = re.findall(r"\b([A-Za-z_]\w*)\s*(?:<[^;(){}]*>)?\s*\(", body)
    return "\n".join([body, *(defs[c] for c in set(called) if c in defs and c != entry)])


def block_shapes(recorded: tuple[int, int, int], preset: str) -> tuple[tuple[int, int, int], ...]:
    """Candidate blocks with the recorded block's dimensionality (1D, 2D or 3D), at most 1024
    threads and at least one warp, the recorded block first."""
    xs = (32, 64, 128, 256, 512, 1024) if preset == "full" else (32, 64, 128, 256)
    ys = (1,) if recorded[1] == 1 and recorded[2] == 1 else (1, 2, 4, 8, 16)
    zs = (1,) if recorded[2] == 1 else (1, 2, 4, 8)
    shapes = [(x, y, z) for x in xs for y in ys for z in zs if 32 <= x * y * z <= 1024]
    if recorded[1] == 1 and recorded[2] == 1:
        shapes = [(x, 1, 1) for x in (32, 64, 128, 256, 512, 1024)]
    return (recorded, *[b for b in shapes if b != recorded])


_COARSEN_Z = re.compile(r"#\s*ifndef\s+KF_ZC\b")
COARSEN_Z = (1, 2, 4, 8, 16)


def coarsen_values(variant: Variant) -> tuple[int, ...]:
    """z points per thread worth searching: for a source written to run ``KF_ZC`` consecutive z
    indices per thread (``#ifndef KF_ZC``, as the offline ``zmarch`` rewrite makes it, used in
    the entry's own body) that the variant does not fix already, launched with more than one
    block along z."""
    code, entry = variant.source.code, variant.source.entry
    if not _COARSEN_Z.search(code) or "KF_ZC" in dict(variant.defines) or \
            "KF_ZC" not in _entry_scope(code, entry):  # another kernel of the module was
        return ()
    gz = variant.launch.grid[2]
    return tuple(c for c in COARSEN_Z if c <= gz) if gz > 1 else ()


def coarsened(launch: LaunchConfig, per_thread: int) -> LaunchConfig:
    """The grid for ``per_thread`` z indices per thread: z blocks divided, rounded up (the
    threads past the end are stopped by the kernel's own z guard)."""
    gx, gy, gz = launch.grid
    return replace(launch, grid=(gx, gy, -(-gz // per_thread)))
