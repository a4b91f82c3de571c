"""Recorded device memory placed again for a replay through the driver (:mod:`.driver`).

A unit recorded at the driver level holds allocations at the virtual addresses the program had
them, and pointers to them inside its raw parameter bytes (and possibly inside the memory
itself). Each granule-aligned span around the regions is mapped at its recorded address where
the device gives it (``cuMemAddressReserve`` at that address, ``cuMemCreate``, ``cuMemMap``), so
that every pointer stays valid; a region whose address cannot be had is allocated elsewhere,
and the parameter words pointing into it are moved with it (:func:`relocate`; pointers stored
inside memory then are not, and the replay says which regions moved).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .driver import Driver


@dataclass
class Placement:
    """Where each region is now: ``addr[i]`` for the region recorded at ``recorded[i]``;
    ``relocated``: the indices of the regions not at their recorded address."""

    recorded: tuple[int, ...]
    addr: list[int] = field(default_factory=list)
    relocated: list[int] = field(default_factory=list)


def place(drv: Driver, regions: Sequence[tuple[int, int]], *, fixed: bool = True) -> Placement:
    """Device memory for ``regions`` ((recorded address, size) each): at the recorded addresses
    where ``fixed`` and the device gives them, elsewhere otherwise."""
    g = drv.granularity() if fixed else 1
    spans: list[list[int]] = []  # merged granule-aligned [start, end) around the regions
    for address, size in sorted(regions):
        lo, hi = address // g * g, -(-(address + size) // g) * g
        if spans and lo <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], hi)
        else:
            spans.append([lo, hi])
    mapped = [s for s in spans if fixed and drv.map_at(s[0], s[1] - s[0]) is not None]
    out = Placement(tuple(a for a, _ in regions))
    for i, (address, size) in enumerate(regions):
        if any(s[0] <= address and address + size <= s[1] for s in mapped):
            out.addr.append(address)
        else:
            out.addr.append(drv.alloc(size))
            out.relocated.append(i)
    return out


def relocate(raw: bytes, words: Sequence[tuple[int, int]], p: Placement) -> bytes:
    """``raw`` parameter bytes with every pointer word ((offset, region index)) into a
    relocated region moved with it."""
    out = bytearray(raw)
    for off, i in words:
        if i in p.relocated:
            old = int.from_bytes(out[off:off + 8], "little")
            new = old - p.recorded[i] + p.addr[i]
            out[off:off + 8] = new.to_bytes(8, "little")
    return bytes(out)
