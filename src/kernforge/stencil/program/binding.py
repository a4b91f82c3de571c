"""Where a lifted program's data lives among a kernel's parameters (docs/stencil-programs.md).

One type for both lifting paths (:class:`~kernforge.apps.lift_regions.Lifted` from source,
:class:`~kernforge.apps.lift_probe.Probed` by probing; ``kernforge.apps.program_binding``
builds it from either), so one code generator serves both:

- ``shape``: the grid (nx, ny, nz), 1 along the axes a lower-dimensional program has not;
- ``fields``: per field, the pointer parameter holding it and the element of that buffer
  where its grid starts (a padded volume, the k-th grid of a buffer);
- ``reductions``: per reduction, the pointer parameter of its scalar (element 0);
- ``scalars``: per scalar parameter the program reads (``Param``), its C type in the
  parameter buffer (``float``, ``double``): the generated code reads it from there;
- ``constants``: the values of the ``__constant__`` variables the program reads (baked into
  the generated code as literals);
- ``tables``: ``ConstMem`` arrays that are buffers read at fixed elements (a coefficient
  table): name -> pointer parameter, read by the generated code at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core import ConfigError
from . import expr as ex
from .model import StencilProgram

HINT = "see docs/stencil-programs.md (Operators for lifted programs)"
SCALAR_TYPES = ("float", "double")


@dataclass(frozen=True)
class Placement:
    """A field: its grid starts ``offset`` elements past the pointer parameter ``param``."""

    param: int
    offset: int = 0


@dataclass(frozen=True)
class Binding:
    shape: tuple[int, int, int]
    fields: Mapping[str, Placement]
    reductions: Mapping[str, int] = field(default_factory=dict)
    scalars: Mapping[int, str] = field(default_factory=dict)
    constants: Mapping[str, Any] = field(default_factory=dict)
    tables: Mapping[str, int] = field(default_factory=dict)

    @property
    def points(self) -> int:
        nx, ny, nz = self.shape
        return nx * ny * nz

    def params(self) -> set[int]:
        """Every parameter the binding names."""
        return ({p.param for p in self.fields.values()} | set(self.reductions.values())
                | set(self.scalars) | set(self.tables.values()))


def check(p: StencilProgram, b: Binding) -> None:
    """ConfigError (with a hint) when ``b`` does not bind every field, reduction, scalar and
    constant of ``p``, or when a written grid overlaps another grid of the binding (a
    generated operator reads every grid as it was before the launch)."""
    _nx, ny, nz = b.shape
    if min(b.shape) < 1 or (p.dims < 3 and nz != 1) or (p.dims < 2 and ny != 1):
        raise ConfigError(f"grid {b.shape} for a {p.dims}D program", hint=HINT)
    names = [f.name for f in p.fields]
    missing = [n for n in names if n not in b.fields]
    if missing:
        raise ConfigError(f"the binding places no grid for the fields {missing}", hint=HINT)
    missing = [r.name for r in p.reductions if r.name not in b.reductions]
    if missing:
        raise ConfigError(f"the binding names no scalar for the reductions {missing}", hint=HINT)
    for i in p.params():
        if b.scalars.get(i) not in SCALAR_TYPES:
            raise ConfigError(f"scalar parameter {i} has type {b.scalars.get(i)!r} in the binding",
                              hint=f"one of {SCALAR_TYPES}")
    for e in [o.expr for o in p.outputs] + [r.expr for r in p.reductions]:
        for node in ex.walk(e):
            if isinstance(node, ex.ConstMem) and node.name not in b.tables:
                v = b.constants.get(node.name)
                if v is None or (node.array and (isinstance(v, int | float)
                                                 or node.index >= len(v))):
                    raise ConfigError(f"no value for __constant__ {node.name}[{node.index}]",
                                      hint="give Binding.constants the values the program "
                                           "set, or a table parameter")
    size = b.points
    spans = [(n, pl.param, pl.offset, pl.offset + size) for n, pl in b.fields.items()]
    for n in p.names("out", "inout"):
        pl = b.fields[n]
        for other, param, lo, hi in spans:
            if other != n and param == pl.param and lo < pl.offset + size and pl.offset < hi:
                raise ConfigError(f"written field {n!r} overlaps field {other!r} in parameter "
                                  f"{param}: a neighbour read would see new values",
                                  hint="an operator for such a kernel is not generated")
