"""A recorded step's boundary kernels on the fake CUDA driver (apps/fused_steps.py): the
launches of a sequence unit between two stencil launches are the step's companions, each
replayed alone on the sequence's placement as a probe target; fake_loop's ``offset`` kernel
(it adds to the first 8 points of the step's OUT) is probed and refused with the reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kernforge.apps import lift_companion as lc
from kernforge.apps.fused_steps import LaunchTarget, launch_slots, step_companions, whole_steps
from kernforge.apps.probe import Recognized
from kernforge.backends.driver import Driver
from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeReplay
from kernforge.testing.fakedriver import FakeCuda


def test_companions_of_a_recorded_step(on_fake: FakeCuda, fake: FakeCuda, tmp_path: Path
                                       ) -> None:
    status, units, problems, _ = record_command(on_fake.loop_command("sk" * 4), tmp_path / "r",
                                                sequence=3, max_instances=1)
    assert status == 0 and not problems
    rec = read_native(units[0])
    whole = NativeReplay(rec, Driver(library=str(fake.libdir / "libcuda.so.1")))
    names = [s.entry for s in rec.steps]
    assert names == ["heat", "offset"] * 2 + ["heat"], names  # ends at the 3rd heat
    assert whole_steps(whole, 1) == 2 and whole_steps(whole, 0) == 3
    t = LaunchTarget(whole, 1)  # offset(x, v): x[0..7] += v + bias[i % 4]
    (buf,) = t.buffers
    assert launch_slots(rec.steps[1])[0].pointer and buf.param == 0
    x = np.arange(buf.nbytes // 8, dtype=np.float64)
    got = t.run({0: x.view(np.uint8)})[0].view(np.float64)
    v = np.frombuffer(rec.steps[1].param_bytes[8:16], np.float64)[0]
    bias = np.array([0.5, 0.25, 0.125, 0.0625] * 2)
    np.testing.assert_array_equal(got[:8], x[:8] + v + bias)
    np.testing.assert_array_equal(got[8:], x[8:])
    n = int.from_bytes(rec.param_bytes[16:20], "little")
    r = Recognized(0, 1, "float64", (n, 1, 1), "star", 1, 1, {(0, 0, 0): 1.0}, "copy")
    why = step_companions(whole, r)
    assert isinstance(why, lc.Refused), why
    assert why.reason == ("offset: it writes inside the grid (at z=0, y=0, x=1): only face "
                          "rules are folded")  # probed on the fake device, as on a GPU
    other = Recognized(1, 0, "float64", (n, 1, 1), "star", 1, 1, {(0, 0, 0): 1.0}, "copy")
    why = step_companions(whole, other)  # had the step written the other buffer
    assert isinstance(why, lc.Refused) and "0 parameters point to OUT" in why.reason
