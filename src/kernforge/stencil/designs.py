"""The registry of stencil designs: one line per design module (each ends in ``DESIGN``, see
:mod:`kernforge.stencil.kernels.design`). Adding a design is a module and a line here; adding a
knob to a design is its values, its words and its effect, all in that design's module: the
forge's change names and idea log come from here (:func:`knob_names`, :func:`meaning`)."""

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


# the changes of a forge run's rounds when ``--changes`` names none: the design first, then
# knobs in this order, the likeliest wins first (the H200's first run: parallelism and bytes
# in flight); a run of N rounds takes the first N
ROUND_ORDER = ("design", "pf", "lz", "vx", "ry", "h2", "cx", "ty", "tx", "cy", "fs", "smem",
               "minb", "pipe", "block", "st", "xs", "pn", "cw", "lz", "pf")


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


def knob_names() -> list[str]:
    """Every knob of every design, each once, in registry order."""
    return list(dict.fromkeys(k for d in REGISTRY.values() for k in d.knobs))


def meaning(knob: str) -> str | None:
    """What ``knob`` does, in words, with the designs that have it (``zmarch, ztile: ...;
    planesweep: ...`` where designs word it differently); None for a name no design has."""
    by_text: dict[str, list[str]] = {}
    for d in REGISTRY.values():
        if knob in d.knobs:
            by_text.setdefault(d.knobs[knob], []).append(d.name)
    return "; ".join(f"{', '.join(names)}: {text}" for text, names in by_text.items()) or None
