"""Elided companions on the fake CUDA driver (apps/fused_steps.py, apps/fused_elided.py): a
recorded sequence of fake_loop's ``l`` steps (heat, then ``sqdiff`` writing sum((out - in)^2)
into a third buffer) is classified by probing each launch on the sequence's placement, the
diagnostic elided; the check of what a deployment runs (``heat_x3``, the fake's bit-exact fused
heat, then the recorded fourth step) passes against four recorded steps on every region, and a
wrong fused kernel (``heat_x5`` for three steps) is refused; ``sqacc`` (it adds to the result)
is refused by the probe."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from kernforge.apps import lift_companion as lc
from kernforge.apps.fused_elided import ElidedCheck
from kernforge.apps.fused_steps import step_companions, whole_steps
from kernforge.apps.operator_gpu import ReplayTarget
from kernforge.apps.probe import Recognized
from kernforge.backends.driver import Driver
from kernforge.deploy import native as nd
from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeReplay
from kernforge.replay.native_sequence import first_launch
from kernforge.testing.fakedriver import FakeCuda


class Fused:
    """One launch of the fake's fused heat (``heat_xT``) with the first launch's parameters:
    what an adapter run does on the GPU."""

    def __init__(self, rp: NativeReplay, fake: FakeCuda, entry: str) -> None:
        self.rp = rp
        self.fn = rp.drv.function(rp.drv.load(f"KFFAKE {fake.kernels}\0".encode()), entry)

    def run(self) -> None:
        self.rp.drv.launch(self.fn, (1, 1, 1), (1, 1, 1), 0, self.rp.params,
                           self.rp.rec.launch_attrs)
        self.rp.drv.synchronize()


def _record(on_fake: FakeCuda, fake: FakeCuda, tmp: Path, letter: str
            ) -> tuple[NativeReplay, Recognized]:
    status, units, problems, _ = record_command(on_fake.loop_command(letter * 6, n=64), tmp,
                                                sequence=5, max_instances=1)
    assert status == 0 and not problems, problems
    rec = read_native(units[0])
    assert [s.entry for s in rec.steps] == ["heat", "sq" + ("diff" if letter == "l" else "acc")
                                            ] * 4 + ["heat"]
    n = int.from_bytes(rec.param_bytes[16:20], "little")
    whole = NativeReplay(rec, Driver(library=str(fake.libdir / "libcuda.so.1")))
    return whole, Recognized(0, 1, "float64", (n, 1, 1), "star", 1, 1,
                                         {(0, 0, 0): 1.0}, "copy")


def test_a_diagnostic_is_elided_and_checked_on_every_region(on_fake: FakeCuda, fake: FakeCuda,
                                                            tmp_path: Path) -> None:
    whole, r = _record(on_fake, fake, tmp_path / "r", "l")
    comps = step_companions(whole, r)
    assert not isinstance(comps, lc.Refused), comps
    (c,) = comps
    assert c.role == "elided" and c.faces == () and c.in_slots == (0,) and c.out_slots == (8,)
    assert c.others == (24,)
    # the id the interposer gives the image the program loaded ("KFFAKE <kernels>", its NUL)
    assert c.image == nd.image_id(f"KFFAKE {on_fake.kernels}".encode() + b"\0")
    assert c.spec()["image"] == c.image
    (w,) = c.elided or ()
    assert (w.param, w.start, w.end, w.dtype) == (3, 0, 8, None)  # res[0]; unmangled: no type
    assert whole_steps(whole, 1) == 4  # so T = 3 is checked against 4 recorded steps
    rp = first_launch(whole)
    t = ReplayTarget(rp)
    check = ElidedCheck(whole, t, r, 3, comps)
    assert len(check.after) == 2 and w.region in check.regions
    why, done = check.recorded(Fused(rp, fake, "heat_x3"))  # type: ignore[arg-type]
    assert why is None and "4 recorded steps on every region written" in done[0], why
    why, done = check.fresh(Fused(rp, fake, "heat_x3"))  # type: ignore[arg-type]
    assert why is None and len(done) == 2, why
    why, _ = check.recorded(Fused(rp, fake, "heat_x5"))  # type: ignore[arg-type]
    assert why is not None and "differs from 4 recorded steps" in why, why
    # the result alone wrong: what the held step leaves in res, moved by one ulp
    scale, want = check.refs["recorded"]
    got = {i: v.copy() for i, v in want.items()}
    res = got[w.region][w.start:w.end].view(np.float64)
    res[0] = np.nextafter(res[0], np.inf)
    why = check.differs(got, want, scale)
    assert why is not None and "not bit for bit" in why, why
    # the same result known as a float64: one ulp is within the bound, twice the value is not
    typed = ElidedCheck(whole, t, r, 3, (dataclasses.replace(
        c, elided=(dataclasses.replace(w, dtype="float64"),)),))
    assert typed.differs(got, want, scale) is None
    res[0] = 2 * want[w.region][w.start:w.end].view(np.float64)[0]
    why = typed.differs(got, want, scale)
    assert why is not None and "element 0 is" in why and "allowed +-" in why, why


def test_an_accumulating_diagnostic_is_refused(on_fake: FakeCuda, fake: FakeCuda,
                                               tmp_path: Path) -> None:
    whole, r = _record(on_fake, fake, tmp_path / "r", "L")
    why = step_companions(whole, r)
    assert isinstance(why, lc.Refused)
    assert why.reason.startswith("sqacc: what it leaves in parameter 3 depends on what the "
                                 "buffer held before"), why
