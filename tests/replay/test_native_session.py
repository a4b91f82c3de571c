"""A native unit's study evaluates its trials in one long-lived child (the session): the unit
read and placed once, every variant verified and timed there; a variant that kills the child
costs only itself, and the next one runs in a fresh child. Run on the fake driver."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernforge.core import RecordingFormatError
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeVariant
from kernforge.replay.native_session import NativeSession
from kernforge.testing.fakedriver import FakeCuda


@pytest.fixture(scope="module")
def recorded(record_fake: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
             ) -> Path:
    out = tmp_path_factory.mktemp("rec")
    status, _, problems, _ = record_fake(out, max_instances=1)
    assert status == 0 and not problems
    return out


def test_one_child_evaluates_every_variant(on_fake: FakeCuda, recorded: Path) -> None:
    unit = recorded / "heat-0"
    with NativeSession(unit, warmup=0, repeat=2) as s:
        got = [s.evaluate(v) for v in (NativeVariant(), NativeVariant(block=(64, 1, 1)),
                                       NativeVariant(carveout=0), NativeVariant())]
        assert [m.status.value for m in got] == ["OK"] * 4, [m.message for m in got]
        assert all(len(m.samples) == 2 for m in got)
        assert s.started == 1 and s.placement["relocated"] == []


def test_a_crash_costs_only_its_own_evaluation(on_fake: FakeCuda, recorded: Path) -> None:
    """gather reads pointers stored in device memory: relocated, they point nowhere."""
    with NativeSession(recorded / "gather-0", warmup=0, repeat=1, fixed=False) as s:
        first, second = s.evaluate(NativeVariant()), s.evaluate(NativeVariant())
    assert first.status.value == "RUNTIME_FAILED" and "SIGSEGV" in first.message
    assert second.status.value == "RUNTIME_FAILED" and s.started == 2
    with NativeSession(recorded / "heat-0", warmup=0, repeat=1) as s:
        assert s.evaluate(NativeVariant()).ok  # the crash of another session left nothing


def test_damaged_data_is_the_recording_error(on_fake: FakeCuda, recorded: Path,
                                             tmp_path: Path) -> None:
    unit = tmp_path / "heat-0"
    shutil.copytree(recorded / "heat-0", unit)
    blob = unit / "blobs" / f"{read_native(unit).regions[0].prologue}.npy"
    blob.write_bytes(blob.read_bytes()[:-8] + b"damaged!")
    with NativeSession(unit) as s, pytest.raises(RecordingFormatError):
        s.evaluate(NativeVariant())
