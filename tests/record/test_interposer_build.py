"""The interposer library is found again without reading and hashing its sources: a stamp
keyed by their sizes and modification times names the library built from them
(record/interposer.py, :func:`build`), and a stamp that names anything else is not followed."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernforge.core import ConfigError
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
    assert stamp.read_text().split()[0] == lib.name

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
    assert stamp.read_text().split()[0] == lib.name  # and stamped again


def test_a_stamp_naming_another_file_of_the_folder_is_not_followed(built: Path) -> None:
    # an edited stamp, or a library replaced under its name: ld.so would refuse the file
    # ("cannot be preloaded: ignored") and the command would run without the interposer
    lib = interposer.build(built)
    (stamp,) = _stamps(built)
    other = built / "libkfinterpose-0000000000000000.so"
    other.write_bytes(b"")
    stamp.write_text(other.name + "\n")
    assert interposer.build(built) == lib
    stamp.write_text(stamp.read_text().replace(lib.name, other.name))  # its old size, time
    assert interposer.build(built) == lib
    assert stamp.read_text().split()[0] == lib.name  # stamped again


@contextlib.contextmanager
def _read_only(folder: Path) -> Iterator[None]:
    """``folder`` unwritable, even to root (the immutable attribute), or the test skipped."""
    folder.chmod(0o555)
    immutable = False
    if os.access(folder, os.W_OK):
        immutable = subprocess.run(["chattr", "+i", str(folder)], capture_output=True,
                                   check=False).returncode == 0 if shutil.which("chattr") \
            else False
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("cannot make a folder read-only here")
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


@pytest.mark.parametrize("stamped", [True, False])
def test_a_read_only_cache_holding_the_library_is_used(tmp_path: Path, stamped: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    folder = cache / "interposer"
    folder.mkdir(parents=True)
    lib = interposer.build()
    shutil.copy2(lib, folder / lib.name)
    if stamped:
        interposer.build(folder)
    monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(cache))
    with _read_only(folder):
        assert interposer.build() == folder / lib.name
        assert len(_stamps(folder)) == int(stamped)  # none could be written: no error
    (folder / lib.name).unlink()
    for stamp in _stamps(folder):
        stamp.unlink()
    with _read_only(folder), pytest.raises(ConfigError, match="KERNFORGE_CACHE_DIR"):
        interposer.build()  # a build is needed, and the folder cannot hold it
