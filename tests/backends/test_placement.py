"""A unit's recorded memory placed again by the cuda backend (backends/placement.py), on the
fake driver (a real libcuda.so.1 over host memory): regions at their recorded addresses when
the device gives them, else allocated elsewhere with the parameter words that point into them
moved along, and nothing else in the parameter bytes touched."""

from __future__ import annotations

import numpy as np

from kernforge.backends.driver import Driver
from kernforge.backends.placement import place, relocate
from kernforge.testing.fakedriver import FakeCuda

BASE = 0x27FE_0000_0000  # where the fake driver hands out device memory in recordings
REGIONS = [(BASE + 0x200, 512), (BASE, 512)]  # two in one granule, out of address order


def _params(words: list[int]) -> bytes:
    return b"".join(w.to_bytes(8, "little") for w in words)


def test_regions_keep_their_recorded_addresses_when_mapped_there(fake: FakeCuda) -> None:
    drv = Driver(library=str(fake.libdir / "libcuda.so.1"))
    p = place(drv, REGIONS, fixed=True)
    assert p.addr == [a for a, _ in REGIONS] and p.relocated == []
    raw = _params([BASE + 0x210, BASE + 8, 1234])
    assert relocate(raw, [(0, 0), (8, 1)], p) == raw
    data = np.arange(64, dtype=np.float64)
    drv.htod(p.addr[0], data)  # the memory is really there
    assert bytes(drv.dtoh(p.addr[0], 512)) == data.tobytes()


def test_relocated_regions_move_the_words_that_point_into_them(fake: FakeCuda) -> None:
    drv = Driver(library=str(fake.libdir / "libcuda.so.1"))
    p = place(drv, REGIONS, fixed=False)
    assert p.relocated == [0, 1] and len(set(p.addr)) == 2
    raw = _params([BASE + 0x210, BASE + 8, BASE + 16])  # the third word is not a pointer
    moved = relocate(raw, [(0, 0), (8, 1)], p)
    words = [int.from_bytes(moved[i:i + 8], "little") for i in (0, 8, 16)]
    assert words == [p.addr[0] + 0x10, p.addr[1] + 8, BASE + 16]
