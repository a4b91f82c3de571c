"""A native unit whose data is damaged is an unusable recording (RecordingFormatError, exit 4),
found before anything runs: never a variant that failed (RUNTIME_FAILED, exit 6)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernforge.cli.main import main
from kernforge.core import RecordingFormatError
from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeVariant
from kernforge.replay.native_child import run_isolated
from kernforge.testing.fakedriver import FakeCuda


@pytest.fixture
def unit(on_fake: FakeCuda, tmp_path: Path) -> Path:
    status, units, problems, _ = record_command(on_fake.command(), tmp_path / "rec",
                                                max_instances=1, kernels="*heat*")
    assert status == 0 and not problems and len(units) == 1
    return units[0]


def _prologue(unit: Path) -> Path:
    rec = read_native(unit)
    return unit / "blobs" / f"{rec.regions[0].prologue}.npy"


def test_a_truncated_region_blob_is_refused_on_loading(
        unit: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blob = _prologue(unit)
    blob.write_bytes(blob.read_bytes()[:200])
    with pytest.raises(RecordingFormatError, match="truncated or replaced"):
        read_native(unit)
    assert main(["replay", str(unit)]) == 4
    err = capsys.readouterr().err
    assert "truncated or replaced" in err and "RUNTIME_FAILED" not in err


def test_a_blob_altered_in_place_is_found_before_any_variant_runs(
        unit: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blob = _prologue(unit)
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF  # same size, same header: only the hash can tell
    blob.write_bytes(bytes(data))
    read_native(unit)  # cheap checks pass; the hash is checked where the data is read
    with pytest.raises(RecordingFormatError, match="do not match their hash"):
        run_isolated(unit, [NativeVariant()], repeat=1, warmup=0)
    assert main(["replay", str(unit)]) == 4
    out, err = capsys.readouterr()
    assert "do not match their hash" in err and "variant failed" not in out + err


def test_a_damaged_blob_among_good_units_is_skipped(
        unit: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = shutil.copytree(unit, unit.parent / "heat-1")
    blob = _prologue(unit)
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    assert main(["replay", str(unit.parent)]) == 7  # the healthy one reported, one skipped
    out, err = capsys.readouterr()
    assert good.name in out and "OK" in out
    assert "warning: skipped a damaged unit" in err and unit.name in err
