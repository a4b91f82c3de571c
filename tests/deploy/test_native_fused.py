"""Fused (temporal) native deployment entries: what the line file holds for them, and the
refusals of entries the interposer could not run (record/native/kf_defer.c runs them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge.core import ConfigError
from kernforge.core.native import NativeParam, NativeRecording, NativeRegion
from kernforge.deploy import native as nd


def _rec(tmp_path: Path) -> NativeRecording:
    """solve(unsigned n, double *in, double *out): IN at byte 8, OUT at byte 16."""
    raw = (64).to_bytes(4, "little") + bytes(4) + (0x7000).to_bytes(8, "little") + \
        (0x9000).to_bytes(8, "little")
    regions = (NativeRegion(0x7000, 512, "alloc", "a", None),
               NativeRegion(0x9000, 512, "alloc", "b", "c"))
    return NativeRecording(tmp_path / "unit", "_Z5solvejPdS_", "solve", "img", "cubin",
                           (16, 1, 1), (256, 1, 1), 0,
                           (NativeParam(0, 4), NativeParam(8, 8, ((8, 0),)),
                            NativeParam(16, 8, ((16, 1),))), raw, regions,
                           identity={"device": "fake"},
                           loader=lambda blob: np.frombuffer(b"KFFAKE image", dtype=np.uint8))


def _fused(rec: NativeRecording, **fuse: Any) -> dict[str, Any]:
    args = {"steps": 5, "in_offset": 8, "out_offset": 16, **fuse}
    return nd.fused_entry(rec, image="f.cubin", image_bytes=b"x", entry_name="solve_x5",
                          grid=(4, 1, 1), block=(128, 1, 1), shared_mem=0, evidence={},
                          **args)


def test_a_fused_entry_writes_field_14(tmp_path: Path) -> None:
    rec = _rec(tmp_path)
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [_fused(rec)], {"f.cubin": b"x"}))
    line = nd.interposer_lines(spec).splitlines()[1].split("\t")
    assert len(line) == 14 and line[6] == "solve_x5" and line[13] == "fuse:5:8:16"
    one = nd.entry(rec, {"block": [128, 1, 1]}, "f.cubin", b"x", {})  # no fuse: 13 fields
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [one], {"f.cubin": b"x"}))
    assert len(nd.interposer_lines(spec).splitlines()[1].split("\t")) == 13


@pytest.mark.parametrize(("fuse", "match"), [
    ({"steps": 4}, "odd number"), ({"steps": 1}, "odd number"), ({"steps": 65}, "odd number"),
    ({"steps": True}, "integers"), ({"steps": "5"}, "integers"),
    ({"in_offset": 12}, "8-byte-aligned"), ({"out_offset": 24}, "within the 24"),
    ({"in_offset": -8}, "8-byte-aligned"), ({"out_offset": 8}, "same offset"),
    ({"in_offset": 0}, "compares the pointer"),
])
def test_fused_entries_the_interposer_would_skip_are_refused(
        tmp_path: Path, fuse: dict[str, Any], match: str) -> None:
    with pytest.raises(nd.FusedEntryError, match=match) as info:
        _fused(_rec(tmp_path), **fuse)
    assert isinstance(info.value, ConfigError) and info.value.hint


def test_a_fused_entry_needs_a_key_and_exactly_its_three_numbers(tmp_path: Path) -> None:
    e = _fused(_rec(tmp_path))
    for bad in ({**e, "key": "*"}, {**e, "key": ""}, {**e, "fuse": {"steps": 5}},
                {**e, "fuse": {**e["fuse"], "extra": 1}}, {**e, "fuse": [5, 8, 16]}):
        with pytest.raises(nd.FusedEntryError):
            nd.check_fuse(bad, "here")


def test_read_spec_refuses_a_spec_holding_a_bad_fused_entry(tmp_path: Path) -> None:
    e = _fused(_rec(tmp_path))
    e["fuse"]["steps"] = 6  # written without the check (another tool, an older kernforge)
    path = nd.write_spec(tmp_path / "spec.json", [e], {"f.cubin": b"x"})
    with pytest.raises(nd.FusedEntryError, match="fuses 6 steps"):
        nd.read_spec(path)
    assert json.loads(path.read_text())["entries"][0]["fuse"]["steps"] == 6
