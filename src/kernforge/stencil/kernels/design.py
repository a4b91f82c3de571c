"""What a stencil design declares: where it applies, its parameter space, its generator.

Each design is one module of this package (``naive``, ``zmarch``, ``planesweep``, ``temporal``,
``ztile``, ``zbox``; ``ymarch`` for planar stencils) ending in a ``DESIGN = Design(...)``;
:mod:`kernforge.stencil.designs` lists them, one line each. A parameter (a *knob*) is declared
in its design's module and nowhere else: its values in the design's ``space`` (the first value
is the default and the behaviour from before the knob existed, so existing operators keep their
keys and sources), what it does in words in the design's ``knobs`` (:func:`knobs`; those several
designs share are worded once, :data:`KNOBS`), its effect in the design's generator, which
takes it as a keyword argument. Dispatch, the forge (its ``--changes`` names and idea log) and
the tuner read them from the registry, and so do the forge's searches how to move them: a
design's ``geometry`` (its tile: ordinal dimensions of the TPE round, kept when the design round
sets options back), ``paired`` (what a pair round changes two at a time), ``untuned`` (what the
TPE round keeps as the incumbent has it) and ``unshared`` (what the design round never carries
to or from another design: a knob whose meaning is this design's own).

A generator that cannot build a cell with the given parameters (too much shared memory, a vector
width that does not divide the row, ...) raises :class:`DoesNotFit`; ``matrix.build`` turns
exactly that, and nothing else, into "no operator".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...core import ConfigError
from ..operator import Operator
from ..spec import Cell, Precision
from .common import L2_PREFETCH, DoesNotFit

__all__ = ["BIT", "GEOMETRY", "KNOBS", "L2P", "MINB", "PAIRED", "UNTUNED", "Design",
           "DoesNotFit", "Space", "family", "knobs", "precision_options"]

# knobs several designs share, declared once
BIT = (0, 1)  # an option, off by default
# __launch_bounds__ minimum blocks per SM (values that do not fit a block's size are refused by
# the generator): blocks of 64-512 threads have different useful values
MINB = (1, 2, 3, 4, 6, 8, 12, 16)
L2P = L2_PREFETCH  # an L2 prefetch size on the plane loads (bytes; 0: none)
LAUNCH_ATTRIBUTES = ("l1",)  # applied by matrix.build to any design that lists them
# how the forge's searches move the knobs (a design's defaults, see Design): the tile geometry,
# ordinal and in this order (the TPE round's dimensions)
GEOMETRY = ("vx", "lz", "ty", "tx")
# what a pair round changes two at a time, in this order (its candidates' seeded order follows
# it): the knobs that trade parallelism, registers and bytes in flight against each other
PAIRED = ("vx", "lz", "ty", "tx", "pf", "pn", "pw", "ry")
# what the TPE round leaves as the incumbent has it: l1 measured without effect on the H200
UNTUNED = ("l1",)

Space = dict[str, tuple[Any, ...]]

# what the knobs several designs share do, in words (a readable name, then the idea): the forge's
# idea log and ``--changes`` read them through the registry; a design lists the ones it has
KNOBS = {
    "vx": "vector width: more x points per thread, wider aligned loads and stores",
    "lz": "z-chunk length: more blocks in flight vs. halo planes re-read per chunk",
    "ty": "block height: occupancy and y-halo reuse",
    "tx": "block width: row length per warp and x-halo share",
    "pf": "planes in flight per thread (a register ring): more bytes in flight per SM",
    "minb": "minimum resident blocks per SM: a __launch_bounds__ register cap (occupancy bought "
            "with registers, spills beyond the cap)",
    "l1": "the largest L1 (shared-memory carveout 0%): more of the neighbour rows hit in L1, "
          "fewer requests to the L2 (whose partition link bounds the star kernels on the H200)",
    "zo": "launch order: z-chunks first (grid z, x, y), so the blocks that share a column's "
          "halo planes run together and meet in the L2 instead of a plane of tiles apart",
    "l2p": "L2 prefetch size on the plane loads or copies (.L2::128B, .L2::256B): on a miss "
           "the L2 fetches the aligned 128/256 bytes from DRAM, so a row's later sectors are "
           "requested with its first (more bytes in flight per load)",
    "sc": "streaming stores (st.global.cs, evict-first): output lines do not displace input "
          "planes still read from L2",
    "cw": "fp64 weights in constant memory: a DFMA takes no 64-bit immediate (two moves per "
          "FMA with literal weights)",
    "ca": "asynchronous copies cached in L1 as well (cp.async.ca, not .cg): a neighbouring "
          "block on the same SM may find the shared halo rows and planes there",
}


def knobs(*shared: str, **own: str) -> dict[str, str]:
    """A design's knobs in words: the ``shared`` ones as :data:`KNOBS` says, and its ``own``
    (a readable name, then the idea)."""
    return {**{k: KNOBS[k] for k in shared}, **own}


def precision_options(cell: Cell, *, cw: bool = True) -> Space:
    """Knobs that exist for one precision only: ``h2`` (fp16 pairs in ``__half2``
    arithmetic) and ``cw`` (fp64 weights in constant memory)."""
    if cell.precision is Precision.FP16:
        return {"h2": BIT}
    if cell.precision is Precision.FP64 and cw:
        return {"cw": BIT}
    return {}


FAMILIES = ("star", "box", "varcoeff", "temporal")


def family(cell: Cell) -> str:
    """The kind of stencil a design declares itself for."""
    st = cell.stencil
    if st.temporal:
        return "temporal"
    return st.kind if st.kind in ("box", "varcoeff") else "star"


@dataclass(frozen=True)
class Design:
    """One design: ``where`` maps each stencil family it builds to its rank there (0: the
    preferred design), ``space`` gives each parameter's values for a cell (the default first),
    ``generate(cell, **params)`` builds the operator or raises :class:`DoesNotFit`, ``knobs``
    says what each parameter of any of its spaces does (:func:`knobs`); ``planar``:
    it also builds planar stencils (``StencilSpec.dims == 2``), the others only 3D ones;
    ``planar_only``: it builds planar stencils only (no matrix cell, so no pinned source);
    ``presets(cell)``: parameter sets to try, best guess first, where no search has run
    (operator matching), instead of the defaults alone. ``geometry``, ``paired``, ``untuned``
    and ``unshared`` tell the forge's searches how to move its knobs (the module docstring;
    each names knobs its spaces may not have for every cell: a search skips those)."""

    name: str
    where: Mapping[str, int]
    space: Callable[[Cell], Space]
    generate: Callable[..., Operator]
    knobs: Mapping[str, str] = field(default_factory=dict)  # each knob in words
    planar: bool = False  # also builds planar (dims=2) stencils
    planar_only: bool = False  # builds planar stencils only
    presets: Callable[[Cell], list[dict[str, Any]]] | None = None
    geometry: tuple[str, ...] = GEOMETRY  # the tile: ordinal, kept when options are reset
    paired: tuple[str, ...] = PAIRED  # changed two at a time by a pair round
    untuned: tuple[str, ...] = UNTUNED  # kept as the incumbent has it by the TPE round
    unshared: tuple[str, ...] = ()  # never carried to or from another design

    def __post_init__(self) -> None:
        unknown = sorted(set(self.where) - set(FAMILIES))
        if unknown:
            raise ConfigError(f"design {self.name}: unknown families {unknown}",
                              hint=f"a design's where names some of {', '.join(FAMILIES)}")
        own = {k for k in (*self.untuned, *self.unshared)
               if k not in self.knobs and k not in LAUNCH_ATTRIBUTES}
        if own:
            raise ConfigError(f"design {self.name}: untuned/unshared name knobs it does not "
                              f"have: {sorted(own)}", hint="declare them in its knobs")

    def rank(self, cell: Cell) -> int | None:
        """Its rank for the cell, or None where it does not apply."""
        if cell.stencil.dims != 3 and not self.planar:
            return None
        if cell.stencil.dims == 3 and self.planar_only:
            return None
        return self.where.get(family(cell))
