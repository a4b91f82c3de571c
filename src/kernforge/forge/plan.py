"""A forge run's plan, checked before any work: the rounds' changes, the seeded design and
operators (``--seed-operator CELL=KEY``)."""

from __future__ import annotations

from collections.abc import Sequence

from ..core import ConfigError
from ..stencil import designs
from ..stencil import matrix as mx
from ..stencil.spec import Cell
from .ideas import known, names


def round_plan(rounds: int, changes: Sequence[str] | None = None) -> list[str]:
    """The changes of rounds 1..N: the design first, then parameters in the order the design
    registry gives (:data:`kernforge.stencil.designs.ROUND_ORDER`); or ``changes`` as given (one round each; every name must be a known change)."""
    if changes:
        unknown = [c for c in changes if not known(c)]
        if unknown:
            raise ConfigError(f"unknown forge change(s): {', '.join(unknown)}",
                              hint=f"choose from {names()}")
        return list(changes)
    return list(designs.ROUND_ORDER[:rounds])


def check_plan(rounds: int, changes: Sequence[str] | None, seed_design: str | None,
               seeds: dict[str, str] | None = None, cells: Sequence[Cell] = ()) -> None:
    """A typed error for a run's plan before any work (an output directory, a process)."""
    round_plan(rounds, changes)
    if seed_design is not None and seed_design not in mx.DESIGNS:
        raise ConfigError(f"unknown stencil design {seed_design!r}",
                          hint=f"one of {', '.join(mx.DESIGNS)}")
    by_id = {c.id: c for c in cells}
    for cid, key in (seeds or {}).items():
        if cid not in by_id:
            raise ConfigError(f"a seed operator for {cid}, which this run does not forge",
                              hint="add the cell to --cell-ids (or the filters), or drop its "
                                   "--seed-operator")
        mx.from_key(by_id[cid], key)  # a ConfigError unless it builds with exactly that key


def parse_seeds(specs: Sequence[str]) -> dict[str, str]:
    """``CELL=KEY`` items (``--seed-operator``) as {cell id: operator key}."""
    seeds: dict[str, str] = {}
    for spec in specs:
        cid, sep, key = spec.partition("=")
        if not sep or "[" not in key:
            raise ConfigError(f"--seed-operator {spec!r}: not CELL=KEY",
                              hint="e.g. star_2/1024x1024x32/fp32=planesweep[ca=1,lz=28,...] "
                                   "with the key as the forge or the bench printed it")
        cell_id = Cell.parse(cid.strip()).id  # as --cell-ids spells it (a typed error if bad)
        if cell_id in seeds:
            raise ConfigError(f"--seed-operator: two seeds for {cell_id}",
                              hint="one --seed-operator per cell")
        seeds[cell_id] = key.strip()
    return seeds
