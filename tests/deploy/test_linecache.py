"""The cache of verified native deployments (deploy/linecache.py) trusts a kept line file only
while every file it was verified from is the one it recorded: real files, the real clock."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kernforge.deploy import linecache


@pytest.fixture
def kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A spec, an image, a library and two sources made 3 s ago (past RACY_NS), remembered."""
    monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "native"
    src.mkdir()
    files = {"spec": tmp_path / "spec.json", "image": tmp_path / "spec.images" / "t.bin",
             "lib": tmp_path / "lib.so", "a": src / "a.c", "b": src / "b.h"}
    for name, path in files.items():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(f"{name} contents\n".encode())
    files["src"] = src
    started = time.time_ns() + 3 * 10**9  # as if verified 3 s after the files were written
    lines = linecache.remember(str(files["spec"]), "# lines\n", str(files["lib"]),
                               [str(files["image"])], [str(files["a"]), str(files["b"])],
                               str(src), started)
    assert lines is not None and Path(lines).read_text() == "# lines\n"
    files["lines"] = Path(lines)
    return files


def test_an_unchanged_spec_is_found(kept: dict[str, Path],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert linecache.lookup(str(kept["spec"])) == (str(kept["lib"]), str(kept["lines"]))
    # the same spec named relative to the working directory
    monkeypatch.chdir(kept["spec"].parent)
    assert linecache.lookup("spec.json") == (str(kept["lib"]), str(kept["lines"]))


@pytest.mark.parametrize("name", ["spec", "image", "lib", "a", "lines"])
def test_a_file_rewritten_with_its_size_and_times_kept_is_not_trusted(
        kept: dict[str, Path], name: str) -> None:
    path = kept[name]
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # size and mtime as before: ctime moved
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    assert linecache.lookup(str(kept["spec"])) is None


@pytest.mark.parametrize("name", ["spec", "image", "lib", "a"])
def test_a_file_replaced_or_removed_is_not_trusted(kept: dict[str, Path], name: str) -> None:
    path = kept[name]
    other = path.with_name(path.name + ".new")
    other.write_bytes(path.read_bytes())  # the same bytes, another file
    os.replace(other, path)
    assert linecache.lookup(str(kept["spec"])) is None
    path.unlink()
    assert linecache.lookup(str(kept["spec"])) is None


def test_a_source_added_beside_the_interposers_is_not_trusted(kept: dict[str, Path]) -> None:
    (kept["src"] / "c.c").write_text("new\n")
    assert linecache.lookup(str(kept["spec"])) is None


def test_a_spec_of_another_path_or_a_damaged_record_is_a_miss(kept: dict[str, Path]) -> None:
    copy = kept["spec"].with_name("copy.json")
    copy.write_bytes(kept["spec"].read_bytes())
    assert linecache.lookup(str(copy)) is None
    record = Path(linecache.record_path(str(kept["spec"])))
    whole = record.read_bytes()
    for damaged in (whole[: len(whole) // 2], whole.replace(b"\nlib\t", b"\nlib "), b"",
                    whole.replace(linecache.MAGIC.encode(), b"something else")):
        record.write_bytes(damaged)
        assert linecache.lookup(str(kept["spec"])) is None
    record.write_bytes(whole)
    assert linecache.lookup(str(kept["spec"])) is not None


def test_files_changed_just_before_their_verification_are_not_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Within RACY_NS of the verification a change may fall in the same tick of the file
    system's clock as the next one: such a spec is verified again at its next start."""
    monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(tmp_path / "cache"))
    spec, lib = tmp_path / "spec.json", tmp_path / "lib.so"
    spec.write_text("{}")
    lib.write_text("lib")
    assert linecache.remember(str(spec), "x\n", str(lib), [], [], str(tmp_path),
                              time.time_ns()) is None
    assert linecache.lookup(str(spec)) is None
    assert not (tmp_path / "cache" / "deploy").exists()  # nothing written for it


def test_a_hit_keeps_its_record_from_being_pruned(kept: dict[str, Path]) -> None:
    record = Path(linecache.record_path(str(kept["spec"])))
    month = time.time() - linecache.UNUSED_S - 60
    os.utime(record, (month, month))
    assert linecache.lookup(str(kept["spec"])) is not None
    assert time.time() - record.stat().st_mtime < 60


def test_unused_records_and_old_line_files_are_pruned(kept: dict[str, Path],
                                                      tmp_path: Path) -> None:
    folder = Path(linecache.cache_dir())
    record = Path(linecache.record_path(str(kept["spec"])))
    key = record.stem
    old_lines = folder / f"{key}-0123456789abcdef.tsv"
    old_lines.write_text("# an earlier spec at this path\n")
    long_ago = time.time() - linecache.UNUSED_S - 60
    for p in (record, kept["lines"], old_lines):
        os.utime(p, (long_ago, long_ago))
    other = tmp_path / "other.json"  # a start of another spec prunes what is old
    other.write_text("{}")
    lib = kept["lib"]
    assert linecache.remember(str(other), "o\n", str(lib), [], [], str(kept["src"]),
                              time.time_ns() + 3 * 10**9) is not None
    names = sorted(p.name for p in folder.iterdir())
    assert record.name not in names and old_lines.name not in names
    assert kept["lines"].name not in names
    assert any(n.endswith(".verified") for n in names)  # the other spec's own


def test_a_record_that_is_not_a_regular_file_is_a_miss_without_blocking(
        kept: dict[str, Path]) -> None:
    record = Path(linecache.record_path(str(kept["spec"])))
    record.unlink()
    os.mkfifo(record)  # an open for reading would wait for a writer
    assert linecache.lookup(str(kept["spec"])) is None
    record.unlink()
    record.symlink_to(kept["spec"])
    assert linecache.lookup(str(kept["spec"])) is None
