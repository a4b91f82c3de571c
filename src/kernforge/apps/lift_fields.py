"""Fields of a lifted program: their roles (shared by lifting from source and by probing), the
names of the grids one buffer holds, a reduction's reads of new values."""

from __future__ import annotations

from collections.abc import Mapping

from ..stencil.program import expr as ex


def is_coef(name: str, exprs: list[ex.Expr]) -> bool:
    """A field that only multiplies taps of other fields, read at one offset."""
    offs = {t.offset for e in exprs for t in ex.taps(e) if t.field == name}
    if len(offs) != 1:
        return False
    for e in exprs:
        poly = ex.polynomial(e, _Ones(), _Ones())
        for mono in poly:
            if any(f == name for f, _ in mono) and all(f == name for f, _ in mono):
                return False
    return True


class _Ones(dict):  # type: ignore[type-arg]
    """Every scalar 1 (the structure of an expansion, not its values)."""

    def __contains__(self, k: object) -> bool:
        return True

    def __getitem__(self, k: object) -> float:
        return 1.0


def rename_components(e: ex.Expr, several: set[str]) -> ex.Expr:
    """``ptr#k`` as ``ptr_k`` for a buffer read at several components, else ``ptr``."""
    if isinstance(e, ex.Tap) and "#" in e.field:
        ptr, k = e.field.split("#")
        return ex.Tap(f"{ptr}_{k}" if ptr in several else ptr, e.offset)
    if isinstance(e, ex.Bin):
        return ex.Bin(e.op, rename_components(e.a, several), rename_components(e.b, several))
    if isinstance(e, ex.Neg):
        return ex.Neg(rename_components(e.a, several))
    return e


def new_values(e: ex.Expr, outputs: Mapping[str, ex.Expr]) -> ex.Expr:
    """``e`` with each output's formula written as that output's new value."""
    for name, f in outputs.items():
        if e == f:
            return ex.Tap(name)
    if isinstance(e, ex.Bin):
        return ex.Bin(e.op, new_values(e.a, outputs), new_values(e.b, outputs))
    if isinstance(e, ex.Neg):
        return ex.Neg(new_values(e.a, outputs))
    return e
