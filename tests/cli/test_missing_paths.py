"""A recordings path that does not exist is bad input: exit 2 from every command that takes
one, as ``export`` does for a missing run directory (exit 4 is for a recording that exists but
is unusable), with one error line naming the path and a hint, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from .cli_helpers import run

EVOLVE = str(Path(__file__).resolve().parents[2] / "examples" / "evolve-cpu.yaml")
MISSING = "{missing}"


@pytest.mark.parametrize("argv", [
    ["inspect", MISSING], ["replay", MISSING], ["tune", MISSING, "--out", "t"],
    ["evolve", MISSING, "--config", EVOLVE, "--out", "e"],
    ["integrity", "validate", MISSING], ["export", MISSING, "-o", "spec.json"],
    ["serve", "start", "--preload", MISSING],
], ids=lambda argv: " ".join(argv[:2]))
def test_a_missing_recordings_path_exits_2(argv: list[str], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # any output named on the command line lands here
    missing = tmp_path / "nonexistent"
    assert run(*[str(missing) if a == MISSING else a for a in argv]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{missing}: no such" in err and "hint:" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # refused before any work


def test_a_directory_that_is_no_unit_is_still_an_unusable_recording(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "axpy-0").mkdir()
    assert run("integrity", "validate", str(tmp_path / "axpy-0")) == 4
    assert "manifest.json: missing" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["inspect"], ["replay"], ["integrity", "validate"]],
                         ids=" ".join)
def test_a_file_given_as_the_recordings_path_exits_2(argv: list[str], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a recording\n")
    assert run(*argv, str(notes)) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "is a file, not a record" in err and "hint:" in err


def test_a_recordings_directory_given_for_one_unit_exits_2_naming_its_units(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The commonest slip: the directory ``kernforge record -o`` wrote, where one of its units
    is wanted. Bad input (2), its units named, not an unusable recording (4)."""
    for unit in ("axpy-0", "axpy-1"):
        (tmp_path / unit).mkdir()
        (tmp_path / unit / "manifest.json").write_text("{}")
    assert run("integrity", "validate", str(tmp_path)) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{tmp_path} is a recordings directory (2 unit(s)), not one recorded unit" in err
    assert f"{tmp_path / 'axpy-0'}" in err and "Traceback" not in err
