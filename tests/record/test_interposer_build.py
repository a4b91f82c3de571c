"""The interposer library is found again without reading and hashing its sources: a stamp
keyed by their sizes and modification times names the library built from them
(record/interposer.py, :func:`build`), and a stamp that names anything else is not followed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernforge.record import interposer


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """A cache directory holding the library of the current sources (copied, not rebuilt)."""
    lib = interposer.build()
    shutil.copy2(lib, tmp_path / lib.name)
    return tmp_path


def _stamps(folder: Path) -> list[Path]:
    return sorted(folder.glob(".stamp-*"))


def test_a_second_start_finds_the_library_without_reading_the_sources(
        built: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = interposer.build(built)  # hashes the sources, finds the library, stamps it
    assert lib.parent == built and lib.name == interposer.build().name
    (stamp,) = _stamps(built)
    assert stamp.read_text().strip() == lib.name

    def unread() -> dict[str, bytes]:
        raise AssertionError("the sources were read")

    monkeypatch.setattr(interposer, "_sources", unread)
    assert interposer.build(built) == lib
    with pytest.raises(AssertionError, match="the sources were read"):
        interposer.build(built, extra_flags=["-DKF_OTHER"])  # other flags: another stamp


@pytest.mark.parametrize("named", ["libkfinterpose-0000000000000000.so", "../escape.so", ""])
def test_a_stamp_naming_no_library_of_the_folder_is_not_followed(built: Path,
                                                                 named: str) -> None:
    lib = interposer.build(built)
    (stamp,) = _stamps(built)
    (built.parent / "escape.so").write_bytes(b"not a library")
    stamp.write_text(named + "\n")
    assert interposer.build(built) == lib  # found by hashing the sources again
    assert stamp.read_text().strip() == lib.name  # and stamped again
