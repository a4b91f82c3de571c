"""The reader refuses damaged recordings with errors that name the file and the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from record_helpers import copy_unit, edit_manifest

from kernforge.backends import get_backend
from kernforge.core import (
    CompileOptions,
    KernelSource,
    LaunchConfig,
    RecordingError,
    RecordingFormatError,
    RecordingNotFoundError,
    Variant,
)
from kernforge.record import clean_partial, find_recordings, load_recording, write_recording
from kernforge.record.format import canonical_json, manifest_checksum
from kernforge.record.native_format import read_native


def _blob(unit: Path, arg: str = "y", which: str = "prologue") -> Path:
    m = json.loads((unit / "manifest.json").read_text())
    (a,) = [a for a in m["args"] if a["name"] == arg]
    return unit / "blobs" / f"{a[which]}.npy"


def test_manifest_checksum_is_canonical(one_unit: Path) -> None:
    m = json.loads((one_unit / "manifest.json").read_text())
    body = {k: v for k, v in m.items() if k != "checksum"}
    import hashlib
    assert m["checksum"] == hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert m["checksum"] == manifest_checksum(m)
    assert canonical_json({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'


def test_blob_name_is_sha256_of_the_npy_file(one_unit: Path) -> None:
    import hashlib
    for f in (one_unit / "blobs").iterdir():
        assert f.name == hashlib.sha256(f.read_bytes()).hexdigest() + ".npy"


def test_missing_manifest(tmp_path: Path) -> None:
    (tmp_path / "axpy-0").mkdir()
    with pytest.raises(RecordingFormatError, match=r"axpy-0/manifest.json: missing") as e:
        load_recording(tmp_path / "axpy-0")
    assert e.value.hint and e.value.exit_code == 4  # it exists: an unusable recording


def test_a_path_that_does_not_exist_is_bad_input(tmp_path: Path) -> None:
    """Exit 2 as a ConfigError, yet a RecordingError for the code that catches those."""
    said = r"nope: no such record(ings directory|ed unit)"
    for read in (find_recordings, load_recording, read_native):
        with pytest.raises(RecordingNotFoundError, match=said) as e:
            read(tmp_path / "nope")
        assert isinstance(e.value, RecordingError) and e.value.exit_code == 2
        assert e.value.hint


def test_truncated_manifest(one_unit: Path) -> None:
    path = one_unit / "manifest.json"
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(RecordingFormatError) as e:
        load_recording(one_unit)
    msg = str(e.value)
    assert str(path) in msg and "not valid JSON" in msg and "line" in msg and "char" in msg


def test_edited_manifest_fails_the_checksum(one_unit: Path) -> None:
    def loosen(m: dict) -> None:
        m["args"][1]["policy"]["rtol"] = 0.5
    edit_manifest(one_unit, loosen, fix_checksum=False)
    with pytest.raises(RecordingFormatError) as e:
        load_recording(one_unit)
    assert str(one_unit / "manifest.json") in e.value.message
    assert "modified after recording" in e.value.message
    assert "--tolerance" in (e.value.hint or "")


def test_unknown_schema_version(one_unit: Path) -> None:
    edit_manifest(one_unit, lambda m: m.update(schema_version=2))
    with pytest.raises(RecordingFormatError, match="unknown schema_version 2") as e:
        load_recording(one_unit)
    assert "reads versions 1" in e.value.message and "manifest.json" in e.value.message
    assert "upgrade kernforge" in (e.value.hint or "")


def test_wrong_format(one_unit: Path) -> None:
    edit_manifest(one_unit, lambda m: m.update(format="something-else"))
    with pytest.raises(RecordingFormatError, match="not a kernforge recording") as e:
        load_recording(one_unit)
    assert "manifest.json" in e.value.message


def test_missing_required_keys(one_unit: Path) -> None:
    edit_manifest(one_unit, lambda m: (m.pop("launch"), m["args"][0].pop("dtype")))
    with pytest.raises(RecordingFormatError, match="lacks required key.*launch"):
        load_recording(one_unit)


def test_missing_blob(one_unit: Path) -> None:
    blob = _blob(one_unit)
    blob.unlink()
    with pytest.raises(RecordingFormatError, match="blob referenced by manifest.json is miss"
                       ) as e:
        load_recording(one_unit)
    assert str(blob) in e.value.message


def test_corrupted_blob_bytes(one_unit: Path, tmp_path: Path) -> None:
    other = copy_unit(one_unit, tmp_path / "copy")
    for unit in (one_unit, other):
        blob = _blob(unit)
        data = bytearray(blob.read_bytes())
        data[-1] ^= 0xFF  # same size, one bit pattern changed
        blob.write_bytes(bytes(data))
    rec = load_recording(one_unit)  # hashes are checked lazily, on first load
    with pytest.raises(RecordingFormatError, match="do not match their hash") as e:
        rec.prologue("y")
    assert str(_blob(one_unit)) in e.value.message
    rec.prologue("x")  # other blobs still load
    with pytest.raises(RecordingFormatError, match=_blob(other).name):
        load_recording(other, verify=True)


def test_truncated_blob(one_unit: Path) -> None:
    blob = _blob(one_unit)
    blob.write_bytes(blob.read_bytes()[:-8])
    with pytest.raises(RecordingFormatError, match="truncated or replaced") as e:
        load_recording(one_unit)
    assert blob.name in e.value.message


def test_blob_shape_disagrees_with_manifest(one_unit: Path) -> None:
    blob_id = _blob(one_unit).stem

    def reshape(m: dict) -> None:
        m["blobs"][blob_id]["shape"] = [2, 4]
    edit_manifest(one_unit, reshape)
    with pytest.raises(RecordingFormatError, match=r"holds float64\[8\].*says float64\[2, 4\]"):
        load_recording(one_unit)


def test_blob_dtype_disagrees_with_argument(one_unit: Path) -> None:
    def retype(m: dict) -> None:
        m["args"][0]["dtype"] = "float32"
    edit_manifest(one_unit, retype)
    with pytest.raises(RecordingFormatError, match="argument 'x' is float32"):
        load_recording(one_unit)


def test_find_recordings_ignores_tmp_and_sorts(tmp_path: Path, one_unit: Path) -> None:
    root = one_unit.parent
    for n in (10, 2):
        copy_unit(one_unit, root / "x").rename(root / f"axpy-{n}")
    (root / "x").rmdir()
    tmp = root / ".tmp-deadbeef"
    (tmp / "blobs").mkdir(parents=True)
    (tmp / "manifest.json").write_text("{}")  # even with a manifest, never a unit
    nested = root / "run2" / "axpy-0"
    copy_unit(one_unit, root / "run2")
    assert find_recordings(root) == [root / "axpy-0", root / "axpy-2", root / "axpy-10", nested]
    assert find_recordings(one_unit) == [one_unit]
    assert find_recordings(tmp) == []
    with pytest.raises(RecordingError, match="no such recordings directory"):
        find_recordings(root / "nope")
    (root / "evo.yaml").write_text("evolve: {}\n")
    with pytest.raises(RecordingError, match="is a file, not a recordings directory"):
        find_recordings(root / "evo.yaml")
    (root / "evo.yaml").unlink()
    assert clean_partial(root) == [tmp]
    assert not tmp.exists() and len(find_recordings(root)) == 4


def test_clean_partial_respects_age(tmp_path: Path) -> None:
    old, new = tmp_path / ".tmp-old", tmp_path / ".tmp-new"
    old.mkdir()
    new.mkdir()
    os.utime(old, (0, 0))
    assert clean_partial(tmp_path, older_than_s=3600) == [old]
    assert new.exists()
    assert clean_partial(tmp_path / "missing") == []


def test_write_recording_directly(tmp_path: Path) -> None:
    be = get_backend("null")
    src = KernelSource('def k(a: "float *", s: "short") -> None:\n    a[:] = s\n', "k",
                       "python")
    sig = be.parse_signature(src)
    variant = Variant(src, CompileOptions.of(opt_level="O3"), LaunchConfig(threads=2))
    a0 = np.zeros((3, 5), np.float32, order="F")  # stored in C order
    paths = [write_recording(tmp_path, backend=be, variant=variant,
                             args=[(sig[0], a0), (sig[1], 7)], prologue={"a": a0},
                             epilogue={"a": np.full((3, 5), 7, np.float32)}, instance=5)
             for _ in range(2)]
    assert [p.name for p in paths] == ["k-5", "k-6"]  # a taken number moves on
    r = load_recording(paths[1], verify=True)
    assert r.instance == 6 and r.arg("s").value == 7 and r.arg("s").dtype == "int16"
    assert r.expected("a").shape == (3, 5) and (r.expected("a") == 7).all()
    with pytest.raises(RecordingError, match="no prologue"):
        write_recording(tmp_path, backend=be, variant=variant, args=[(sig[0], a0), (sig[1], 7)],
                        prologue={}, epilogue={})
    assert sorted(d.name for d in tmp_path.iterdir()) == ["k-5", "k-6"]  # no .tmp-* left


def test_empty_array_round_trip(tmp_path: Path) -> None:
    be = get_backend("null")
    src = KernelSource('def k(a: "double *") -> None:\n    pass\n', "k", "python")
    sig = be.parse_signature(src)
    p = write_recording(tmp_path, backend=be, variant=Variant(src), args=[(sig[0], None)],
                        prologue={"a": np.zeros(0)}, epilogue={"a": np.zeros(0)})
    assert load_recording(p, verify=True).prologue("a").shape == (0,)
