"""Fusion's reference from a recorded sequence, on the fake CUDA driver: a sequence unit of
fake_loop's heat loop is recognized by its first launch alone (on the sequence's placement),
and its first T steps, replayed as recorded, are the reference where it holds T steps; the
original re-launched with IN and OUT swapped where it holds fewer."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.apps import fused as fz
from kernforge.apps.adapter import layout
from kernforge.apps.fused_gpu import RecordedSteps, Steps, _references
from kernforge.apps.operator_gpu import ReplayTarget
from kernforge.apps.operator_match import NoMatch, fuse_unit, match_unit
from kernforge.apps.probe import Recognized
from kernforge.backends.driver import Driver
from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeReplay
from kernforge.replay.native_sequence import first_launch
from kernforge.testing.fakedriver import FakeCuda


@pytest.fixture
def seq_unit(on_fake: FakeCuda, tmp_path: Path) -> Path:
    status, units, problems, _ = record_command(on_fake.loop_command("s" * 5), tmp_path / "r",
                                                sequence=5, max_instances=1)
    assert status == 0 and not problems
    return units[0]


def test_the_recorded_sequence_is_the_reference_up_to_its_steps(fake: FakeCuda,
                                                                 seq_unit: Path) -> None:
    rec = read_native(seq_unit)
    whole = NativeReplay(rec, Driver(library=str(fake.libdir / "libcuda.so.1")))
    rp = first_launch(whole)
    assert rp.rec.written == (1,) and not rp.rec.is_sequence and rp.addr == whole.addr
    t = ReplayTarget(rp)
    assert [(b.param, b.written) for b in t.buffers] == [(0, False), (1, True)]
    n = int.from_bytes(rec.param_bytes[16:20], "little")
    r = Recognized(0, 1, "float64", (n, 1, 1), "star", 1, 1, {(0, 0, 0): 1.0}, "copy")
    refs = _references(rp, whole, layout(rec), r, (3, 5, 7))
    assert isinstance(refs[3], RecordedSteps) and isinstance(refs[5], RecordedSteps)
    assert isinstance(refs[7], Steps)  # the sequence holds 5 steps
    for s in (3, 5):
        rp.restore()
        refs[s].run()
        recorded = t.read()
        rp.restore()
        Steps(rp, fz.fuse_field(layout(rec), r, s)).run()
        assert {p: v.tobytes() for p, v in t.read().items()} == \
            {p: v.tobytes() for p, v in recorded.items()}
    rp.restore()
    refs[5].run()  # all 5 steps: the recorded state after the sequence, both levels
    assert all(c.passed for c in whole.verify())
    assert refs[3].time() >= 0.0


def test_a_sequence_unit_is_recognized_by_its_first_launch_in_the_child(
        fake: FakeCuda, seq_unit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    monkeypatch.setenv("KERNFORGE_LIBCUDA", str(fake.libdir / "libcuda.so.1"))
    m = fuse_unit(seq_unit, out_dir=tmp_path / "f", steps=(3,))  # as a one-launch heat unit
    assert isinstance(m, NoMatch) and "1D stencil" in m.reason, m
    m = match_unit(seq_unit, out_dir=tmp_path / "m")  # an adapter replaces one launch
    assert isinstance(m, NoMatch) and "a sequence unit" in m.reason
