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


_KILLED_PARENT = """
import sys
from pathlib import Path
from kernforge.replay.native import NativeVariant
from kernforge.replay.native_child import run_isolated
run_isolated(Path(sys.argv[1]), [NativeVariant()] * 50, repeat=100000, warmup=0)
"""


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc")
def test_the_replay_process_ends_with_a_killed_kernforge(unit: Path) -> None:
    """A kernforge killed by kill -9 (then resumed) leaves no replay process that goes on
    using the device while the resumed run measures."""
    import os
    import signal
    import subprocess
    import sys
    import time

    parent = subprocess.Popen([sys.executable, "-c", _KILLED_PARENT, str(unit)])
    deadline = time.monotonic() + 60
    while not (kids := _children(parent.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert kids, "the replay process did not start"
    time.sleep(0.5)  # past the start: inside the measurement
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{k}").exists() for k in kids) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [k for k in kids if Path(f"/proc/{k}/stat").is_file()
             and Path(f"/proc/{k}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    for k in alive:
        os.kill(k, signal.SIGKILL)
    assert not alive
