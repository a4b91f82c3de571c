"""The registry of stencil designs: one line per design module (each ends in ``DESIGN``, see
:mod:`kernforge.stencil.kernels.design`). Adding a design is a module and a line here; adding a
knob to a design is its space and its generator, both in that design's module."""

from __future__ import annotations

from ..core import ConfigError
from .kernels import naive, planesweep, temporal, ymarch, zbox, zmarch, ztile
from .kernels.design import Design
from .spec import Cell

REGISTRY: dict[str, Design] = {d.name: d for d in (
    naive.DESIGN,
    zmarch.DESIGN,
    planesweep.DESIGN,
    temporal.DESIGN,
    ztile.DESIGN,
    zbox.DESIGN,
    ymarch.DESIGN,  # planar stencils only
)}


def get(name: str) -> Design:
    """The design called ``name``; a :class:`ConfigError` naming the others."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown stencil design {name!r}",
                          hint=f"one of {', '.join(REGISTRY)}") from None


def applicable(cell: Cell) -> list[str]:
    """Designs that can build this cell, the preferred one first (naive last)."""
    ranked = [(rank, name) for name, d in REGISTRY.items()
              if (rank := d.rank(cell)) is not None]
    return [name for _, name in sorted(ranked)]
