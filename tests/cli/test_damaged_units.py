"""A damaged unit among others is skipped with a warning naming it and exit status 7 (issue 32
item 5, issue 43 item 5, for native units too); a directory with no unit at all is one clear line and exit 2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernforge.cli.main import main
from kernforge.testing.fakedriver import FakeCuda


@pytest.fixture
def two_units(on_fake: FakeCuda, recorded: Path, tmp_path: Path) -> Path:
    """heat-0 and a copy of it, heat-1, whose manifest is too damaged to tell its kind."""
    rec = tmp_path / "rec"
    shutil.copytree(recorded / "heat-0", rec / "heat-0")
    shutil.copytree(recorded / "heat-0", rec / "heat-1")
    (rec / "heat-1" / "manifest.json").write_text("garbage")
    return rec


@pytest.mark.parametrize("command", [["replay"], ["inspect"]])
def test_a_damaged_native_unit_is_skipped_and_the_others_run(
        two_units: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, str(two_units)]) == 7
    out, err = capsys.readouterr()
    assert "heat-0" in out
    assert "warning: skipped a damaged unit" in err and "heat-1" in err
    assert "not valid JSON" in err


def test_tune_skips_a_damaged_native_unit(two_units: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", str(two_units), "--out", str(tmp_path / "t"), "--repeat", "2"]) == 7
    out, err = capsys.readouterr()
    assert "1/1 tuning heat-0" in out and "heat-1" in err


def test_only_damaged_units_left_is_the_recording_error(
        two_units: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --kernels selecting none of the good units: nothing usable is left
    assert main(["replay", str(two_units), "--kernels", "nothing*"]) == 4
    assert "heat-1" in capsys.readouterr().err
    shutil.rmtree(two_units / "heat-0")
    assert main(["replay", str(two_units)]) == 4
    assert main(["inspect", str(two_units)]) == 4


@pytest.mark.parametrize("command", ["replay", "inspect"])
def test_a_directory_without_units_is_one_line_and_exit_2(
        tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == (f"error: no recorded units in {tmp_path}: record with kernforge "
                           f"record -o {tmp_path} -- COMMAND")
