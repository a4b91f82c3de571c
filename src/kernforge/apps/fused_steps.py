"""A recorded step's companions, on the device: the launches of a sequence unit between the
stencil's first launch and its second are the step's companions; each is replayed alone on the
sequence's placement as a probe target and either lifted to face rules
(apps/lift_companion.py), so a fused operator can fold it (apps/fused.py), or elided, a
per-step diagnostic the held step re-runs (apps/elide_companion.py).

Only the first step's companions are probed. The interposer fuses a step only when its
companions' parameter bytes equal these outside the slots that hold the step's IN and OUT
pointers, and each comes from the module image it was recorded from (its id in the spec: a
kernel of the same name from another image is not the companion); verification replays the recorded sequence itself, every step's companions included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from ..backends.cxx_names import pointer_dtypes
from ..core.native import NativeLaunch, NativeRecording
from ..deploy.native import recorded_image_id
from ..replay.native import NativeReplay
from . import elide_companion as ec
from . import lift_companion as lc
from .adapter import Slot
from .probe import ProbeBuffer, Recognized


def launch_slots(s: NativeLaunch) -> tuple[Slot, ...]:
    """A sequence launch's parameter layout (apps/adapter.py's, for one launch)."""
    return tuple(Slot(p.offset, p.size, p.size == 8 and len(p.pointers) == 1
                      and p.pointers[0][0] == p.offset) for p in s.params)


class LaunchTarget:
    """Launch ``index`` of a sequence, alone, from the sequence's recorded state with chosen
    contents of its pointer parameters' buffers (a :class:`~.probe.Target`)."""

    def __init__(self, whole: NativeReplay, index: int) -> None:
        assert whole.sequence is not None
        rec, self.whole = whole.rec, whole
        self.launch = s = rec.steps[index]
        self.raw = whole.sequence.params[index]  # relocated with the placement
        self.fn = whole.drv.function(whole.drv.load(rec.blob(s.image).tobytes()), s.entry)
        self.where: dict[int, tuple[int, int]] = {}
        bufs = []
        for i, (p, slot) in enumerate(zip(s.params, launch_slots(s), strict=True)):
            if slot.pointer:
                ri = p.pointers[0][1]
                off = int.from_bytes(s.param_bytes[p.offset:p.offset + 8], "little") \
                    - rec.regions[ri].address
                self.where[i] = (ri, off)
                bufs.append(ProbeBuffer(i, rec.regions[ri].size - off, True, ri))
        self.buffers = tuple(bufs)
        self.ints: tuple[int, ...] = ()
        self.dtype: str | None = None

    def _address(self, param: int) -> int:
        ri, off = self.where[param]
        return self.whole.addr[ri] + off

    def run(self, contents: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        drv, s = self.whole.drv, self.launch
        self.whole.restore()
        for p, raw in contents.items():
            drv.htod(self._address(p), np.ascontiguousarray(raw, dtype=np.uint8))
        call = drv.prepare(self.fn, s.grid, s.block, s.shared_mem, self.raw, s.launch_attrs)
        drv.check(call(), "cuLaunchKernel")
        drv.synchronize()
        return {b.param: np.frombuffer(drv.dtoh(self._address(b.param), b.nbytes),
                                       dtype=np.uint8).copy() for b in self.buffers}


def reach(rec: NativeRecording, s: NativeLaunch) -> list[tuple[int, ec.Span]]:
    """(parameter, the bytes its pointer reaches: to its region's end) of launch ``s``."""
    out = []
    for i, (p, slot) in enumerate(zip(s.params, launch_slots(s), strict=True)):
        if slot.pointer:
            ri = p.pointers[0][1]
            off = int.from_bytes(s.param_bytes[p.offset:p.offset + 8], "little") \
                - rec.regions[ri].address
            out.append((i, (ri, off, rec.regions[ri].size)))
    return out


def _dims(v: Sequence[int]) -> tuple[int, int, int]:
    return int(v[0]), int(v[1]), int(v[2])


def step_companions(whole: NativeReplay, r: Recognized
                    ) -> tuple[lc.Companion, ...] | lc.Refused:
    """The first step's companions of sequence ``whole`` (recognized as ``r`` by its first
    launch), in launch order, each folded (lifted to face rules) or elided
    (apps/elide_companion.py); () when the stencil launches back to back."""
    rec = whole.rec
    slots = launch_slots(rec.steps[0])
    word = {p: int.from_bytes(rec.param_bytes[slots[p].offset:slots[p].offset + 8], "little")
            for p in (r.in_param, r.out_param)}
    found: list[ec.Launch] = []
    for i, s in enumerate(rec.steps[1:], start=1):
        if rec.of_kernel(s):
            break
        ls = launch_slots(s)
        c = lc.companion(s.entry, s.param_bytes, ls, word[r.in_param], word[r.out_param])
        if isinstance(c, lc.Refused):
            return c
        c = replace(c, image=recorded_image_id(rec, s.image),
                    geometry=(_dims(s.grid), _dims(s.block), int(s.shared_mem)),
                    attrs=tuple(bytes(x) for x in s.launch_attrs))
        by_offset = {sl.offset: k for k, sl in enumerate(ls)}
        t = LaunchTarget(whole, i)
        found.append(ec.Launch(c, t, tuple(by_offset[o] for o in c.in_slots),
                               tuple(by_offset[o] for o in c.out_slots), dict(t.where),
                               pointer_dtypes(s.entry) or {}))
    else:
        if found:
            return lc.Refused("the sequence ends before the stencil's second launch: no whole "
                              "step to take its boundary kernels from")
    stencil = [span for _, span in reach(rec, rec.steps[0])]
    return ec.classify(found, stencil, r.shape, r.dtype)


def whole_steps(whole: NativeReplay, companions: int) -> int:
    """How many steps of the sequence are recorded whole: a launch of the stencil followed by
    ``companions`` more launches (a sequence ends at the stencil's N-th launch, so its last
    step's boundary kernels may be missing)."""
    launches = whole.rec.steps
    return sum(1 for i, s in enumerate(launches)
               if whole.rec.of_kernel(s) and i + companions < len(launches))
