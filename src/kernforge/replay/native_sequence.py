"""Replaying a sequence unit: its recorded launches in order, on the restored state.

A sequence unit (record/native_sequence.py) holds the state of every region before its first
launch and after its last, and every launch (kernel, geometry, parameter bytes). Its replay
places the regions as a one-launch unit's are placed (:class:`~.native.NativeReplay`), then
runs the launches in order: each launch of the recorded kernel (the sequence's first launch's
entry and image) as the variant says (geometry, JIT options, carveout, a built image), every
other launch as recorded. Verification then compares every region the sequence leaves, the
intermediate time level in the other buffer of a ping-pong included; timing puts one event
pair around all the launches, queued back to back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..backends.placement import relocate
from ..core.native import NativeLaunch

if TYPE_CHECKING:
    from .native import NativeReplay, NativeVariant


class SequenceLaunches:
    """The launches of a sequence unit on the placement of ``rp`` (its replay)."""

    def __init__(self, rp: NativeReplay) -> None:
        self.rp = rp
        self.steps: tuple[NativeLaunch, ...] = rp.rec.steps
        self.params = [relocate(s.param_bytes, s.pointer_words(), rp.placement)
                       for s in self.steps]
        self._recorded: dict[tuple[str, str], Any] = {}  # (image blob, entry) -> function
        self._modules: dict[str, Any] = {}

    def _recorded_function(self, s: NativeLaunch) -> Any:
        key = (s.image, s.entry)
        if key not in self._recorded:
            drv = self.rp.drv
            if s.image not in self._modules:
                self._modules[s.image] = drv.load(self.rp.rec.blob(s.image).tobytes())
            fn = drv.function(self._modules[s.image], s.entry)
            drv.set_func_attrs(fn, s.func_attrs, max(
                t.shared_mem for t in self.steps if (t.image, t.entry) == key))
            self._recorded[key] = fn
        return self._recorded[key]

    def calls(self, v: NativeVariant, steps: int | None = None, launches: int | None = None
              ) -> list[Any]:
        """Each launch prepared (:meth:`Driver.prepare`), the recorded kernel's as ``v`` says.
        ``steps``: only the first ``steps`` steps (the launches before the recorded kernel's
        launch number ``steps + 1``: a step's other kernels after it included); ``launches``:
        only the first ``launches`` launches."""
        out: list[Any] = []
        seen = 0
        for s, raw in zip(self.steps, self.params):
            if launches is not None and len(out) >= launches:
                break
            if self.rp.rec.of_kernel(s):
                if steps is not None and seen >= steps:
                    break
                seen += 1
                fn = self.rp._function(v)
                grid, block = v.geometry(s)
            else:
                fn, grid, block = self._recorded_function(s), s.grid, s.block
            out.append(self.rp.drv.prepare(fn, grid, block, s.shared_mem, raw, s.launch_attrs))
        return out

    def run(self, v: NativeVariant, steps: int | None = None, launches: int | None = None
            ) -> None:
        for call in self.calls(v, steps, launches):
            self.rp.drv.check(call(), "cuLaunchKernel")
        self.rp.drv.synchronize()

    def time(self, v: NativeVariant, steps: int | None = None) -> float:
        """Seconds between one event pair around the launches (prepared before it)."""
        return self.rp.drv.time_calls(self.calls(v, steps))


def first_launch(whole: NativeReplay) -> NativeReplay:
    """The replay of a sequence's first launch alone, sharing ``whole``'s placement: which
    regions that launch writes is found by running it from the recorded state."""
    from .native import NativeReplay, NativeVariant

    rec = whole.rec
    assert whole.sequence is not None
    whole.restore()
    whole.sequence.run(NativeVariant(), launches=1)
    written = tuple(i for i, r in enumerate(rec.regions)
                    if bytes(whole.drv.dtoh(whole.addr[i], r.size)) != rec.prologue(i).tobytes())
    whole.restore()
    return NativeReplay(rec.first_launch(written), placed=whole)
