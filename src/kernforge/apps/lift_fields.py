"""Roles of a lifted program's fields (shared by lifting from source and by probing)."""

from __future__ import annotations

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
