"""Shared-memory tiles in :mod:`.lift_source`: a tile is a window of a buffer the threads
load together before a barrier.

A write ``s[ty + R][tx + R] = in[...]`` records, per declared dimension of the tile, its index
(one thread axis plus an offset in each dimension) and the value the writing thread stores. A
read ``s[J]`` after the barrier is the value written by the thread the read's index points at:
for every write whose indices reach ``J`` by shifting the thread axes (``tx -> tx + d``), the
written value with the same shift; every write that reaches it (the interior load and the
halo loads) must give the same buffer element, else the tile holds something else than a
window (periodic images, a second field) and the kernel is refused. A read from another
thread needs a halo load beside the interior one; halo loads are assumed to complete the window; the lifted program is checked against the original kernel on the device
before anything replaces it. A tile indexed by two thread axes in one dimension (flattened),
updated in place (a reduction across threads) or read where no write reaches is refused. Where
writes of several barrier phases reach a read, the last phase's hold (a tile cleared, then
loaded).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import syntax
from ..stencil.program import expr as ex
from .lift_symbolic import TRUE, Lin, Poly, Pred, Read, Unliftable, normalize

_AXES = "xyz"


@dataclasses.dataclass
class _Write:
    index: tuple[Poly, ...]
    value: Any
    barriers: int


class Tiles:
    """The tile half of the walker (mixed in before :class:`~.lift_exprs.Exprs`)."""

    tiles: dict[str, list[_Write]]
    barriers: int

    def tile_declare(self, n: Any) -> None:
        if not hasattr(self, "tiles"):
            self.tiles, self.barriers = {}, 0
        for d in n.children_by_field_name("declarator"):
            name = next((syntax.text(x) for x in syntax.walk(d) if x.type == "identifier"), "")
            if d.type != "array_declarator" or not name:
                raise Unliftable(f"a shared variable that is no array ({syntax.text(d)[:40]!r})")
            self.tiles[name] = []

    def _access(self, n: Any) -> tuple[str, tuple[Poly, ...]] | None:
        idx: list[Poly] = []
        while n.type == "subscript_expression":
            idx.append(normalize(self.index(n).poly))  # type: ignore[attr-defined]
            n = n.child_by_field_name("argument")
        name = syntax.text(n)
        if n.type != "identifier" or name not in getattr(self, "tiles", {}):
            return None
        return name, tuple(reversed(idx))

    def tile_write(self, left: Any, op: str, v: Any) -> bool:
        acc = self._access(left) if left.type == "subscript_expression" else None
        if acc is None:
            return False
        if op != "=":
            raise Unliftable(f"the tile {acc[0]} updated in place (a reduction across threads)")
        self.tiles[acc[0]].append(_Write(acc[1], v, self.barriers))
        return True

    def tile_read(self, n: Any) -> Any:
        """The value a read of a tile gives; None where ``n`` reads no tile."""
        acc = self._access(n) if n.type == "subscript_expression" else None
        return None if acc is None else self._read(*acc)

    def _read(self, name: str, index: tuple[Poly, ...]) -> Any:
        found: list[Any] = []
        moves: list[dict[str, Poly]] = []
        phases: list[int] = []
        for w in self.tiles[name]:
            if len(w.index) != len(index):
                raise Unliftable(f"the tile {name} indexed with {len(index)} and "
                                 f"{len(w.index)} subscripts")
            shift = _shift(w.index, index, name)
            if shift is None:
                continue
            if any(p != Poly() for p in shift.values()) and w.barriers == self.barriers:
                raise Unliftable(f"the tile {name} read from another thread before a barrier")
            found.append(_moved(w.value, shift))
            moves.append(shift)
            phases.append(w.barriers)
        if phases and max(phases) > min(phases):  # a later phase writes over (a cleared tile)
            keep = [k for k, ph in enumerate(phases) if ph == max(phases)]
            found, moves = [found[k] for k in keep], [moves[k] for k in keep]
        if not found:
            raise Unliftable(f"a read of the tile {name} that no write reaches "
                             f"([{'], ['.join(p.text() for p in index)}])")
        if len(found) == 1 and any(p != Poly() for p in moves[0].values()):
            raise Unliftable(f"the tile {name} has no halo load: threads at the block's edge "
                             "would read elements no thread wrote")
        first = _unguarded(found[0])
        if any(_unguarded(f) != first for f in found[1:]):
            raise Unliftable(f"the tile {name} holds other values than a window of one buffer "
                             "(periodic images or a second field in its halo)")
        guards = [f.guard for f in found if isinstance(f, Read) and f.guard != TRUE]
        if isinstance(found[0], Read) and guards:
            g = guards[0]
            for x in guards[1:]:
                g = g & x
            return dataclasses.replace(found[0], guard=g)
        return found[0]


def _shift(w: tuple[Poly, ...], r: tuple[Poly, ...], name: str) -> dict[str, Poly] | None:
    """The shift of the thread axes that takes the write's index to the read's; None where
    the write does not reach the read."""
    shift: dict[str, Poly] = {}
    for pw, pr in zip(w, r, strict=True):
        axes = [a for a in _AXES if f"tid.{a}" in pw.symbols() or f"g{a}" in pw.symbols()]
        if len(axes) > 1:
            raise Unliftable(f"the tile {name} indexed by several thread axes in one "
                             f"subscript ({pw.text()}: a flattened tile)")
        diff = normalize(pr - pw)
        if not axes:
            if diff != Poly():
                if pr.symbols() & {f"tid.{a}" for a in _AXES} | {f"g{a}" for a in _AXES}:
                    raise Unliftable(f"the tile {name} written at a fixed element "
                                     f"([{pw.text()}]) that a thread's read may reach")
                return None
            continue
        a = axes[0]
        if diff.symbols() & {f"tid.{a}", f"g{a}", f"bid.{a}"}:
            return None
        sym = f"tid.{a}" if f"tid.{a}" in pw.symbols() else f"g{a}"
        c = pw.coefficient(sym).constant()
        if c not in (1, -1):
            raise Unliftable(f"the tile {name} indexed by {pw.text()} (a thread axis times "
                             "a factor)")
        d = diff if c == 1 else -diff
        if shift.setdefault(a, d) != d:
            return None
    return shift


def _moved(v: Any, shift: dict[str, Poly]) -> Any:
    """``v`` as the thread shifted by ``shift`` computes it."""
    if isinstance(v, Poly):
        for a, d in shift.items():
            v = v.substitute(f"tid.{a}", Poly.sym(f"tid.{a}") + d)
            v = v.substitute(f"g{a}", Poly.sym(f"g{a}") + d)
        return normalize(v)
    if isinstance(v, Lin):
        if v.wraps or v.clamps:
            raise Unliftable("a tile loaded through a wrapped or clamped index")
        return Lin(_moved(v.poly, shift))
    if isinstance(v, Pred):
        return Pred(v.op, _moved(v.a, shift), _moved(v.b, shift))
    if isinstance(v, ex.Expr) and dataclasses.is_dataclass(v):
        return dataclasses.replace(v, **{f.name: _moved(getattr(v, f.name), shift)
                                         for f in dataclasses.fields(v)})
    if isinstance(v, tuple):
        return tuple(_moved(x, shift) for x in v)
    return v


def _unguarded(v: Any) -> Any:
    return dataclasses.replace(v, guard=TRUE) if isinstance(v, Read) else v
