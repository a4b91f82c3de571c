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


# ---- companions: the launches that follow the fused kernel's in every step ----------------------
EDGE = nd.Companion("_Z4edgePdii", bytes(8) + (64).to_bytes(4, "little") + bytes(4), (), (0,))
MIX = nd.Companion("_Z3mixPKdPdi", bytes(16) + (64).to_bytes(4, "little") + bytes(4), (0,),
                   (8,))


def test_companions_go_to_the_line_after_field_14(tmp_path: Path) -> None:
    e = _fused(_rec(tmp_path), companions=[EDGE, MIX, nd.Companion("_Z4noopv", b"", (), ())])
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"f.cubin": b"x"}))
    assert spec.entries[0]["fuse"]["companions"][1] == {
        "name": "_Z3mixPKdPdi", "params": MIX.params.hex(), "in_slots": [0], "out_slots": [8]}
    line = nd.interposer_lines(spec).splitlines()[1].split("\t")
    assert len(line) == 14 + 3 * 4 and line[13] == "fuse:5:8:16:3"
    assert line[14:18] == ["_Z4edgePdii", EDGE.params.hex(), "-", "0"]
    assert line[18:22] == ["_Z3mixPKdPdi", MIX.params.hex(), "0", "8"]
    assert line[22:] == ["_Z4noopv", "-", "-", "-"]


def test_no_companions_write_the_fields_of_before(tmp_path: Path) -> None:
    e = _fused(_rec(tmp_path), companions=[])
    assert "companions" not in e["fuse"]
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"f.cubin": b"x"}))
    assert nd.interposer_lines(spec).splitlines()[1].split("\t")[13] == "fuse:5:8:16"


def test_same_slots_are_xx_in_the_line(tmp_path: Path) -> None:
    """An elided diagnostic's pointer to its own buffer: matched as in the first held step."""
    diag = nd.Companion("_Z6sqdiffPKdS0_iPd", bytes(16) + (64).to_bytes(8, "little")
                        + (0xABCD).to_bytes(8, "little"), (0,), (8,), (24,))
    e = _fused(_rec(tmp_path), companions=[diag])
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"f.cubin": b"x"}))
    assert spec.entries[0]["fuse"]["companions"][0]["same_slots"] == [24]
    line = nd.interposer_lines(spec).splitlines()[1].split("\t")
    assert line[15] == diag.params[:24].hex() + "x" * 16 and line[16:18] == ["0", "8"]


@pytest.mark.parametrize(("comps", "match"), [
    ([EDGE] * 9, "at most 8"),
    ([EDGE._replace(out_slots=(4,))], "8-byte-aligned"),
    ([EDGE._replace(out_slots=(16,))], "within its 16 parameter bytes"),
    ([EDGE._replace(in_slots=(-8,))], "8-byte-aligned"),
    ([MIX._replace(in_slots=(8,))], "names a slot twice"),
    ([MIX._replace(out_slots=(8, 8))], "names a slot twice"),
    ([MIX._replace(same_slots=(8,))], "names a slot twice"),
    ([EDGE._replace(same_slots=(12,))], "8-byte-aligned"),
    ([EDGE._replace(out_slots=(True,))], "lists of integers"),
    ([EDGE._replace(name="")], "no name"),
    ([EDGE._replace(name="a\tb")], "a tab"),
    ([EDGE._replace(params=bytes(32769))], "at most 32768 bytes"),
])
def test_companions_the_interposer_would_skip_are_refused(
        tmp_path: Path, comps: list[nd.Companion], match: str) -> None:
    with pytest.raises(nd.FusedEntryError, match=match) as info:
        _fused(_rec(tmp_path), companions=comps)
    assert isinstance(info.value, ConfigError) and info.value.hint


@pytest.mark.parametrize("bad", [
    "not a list", [{"name": "k", "params": "00"}], [{**EDGE.as_json(), "extra": 1}],
    [{**EDGE.as_json(), "params": "0"}], [{**EDGE.as_json(), "params": "zz" * 16}],
    [{**EDGE.as_json(), "in_slots": "0"}], [{**EDGE.as_json(), "params": 7}], ["edge"],
])
def test_check_fuse_refuses_companions_not_as_written(tmp_path: Path, bad: Any) -> None:
    e = _fused(_rec(tmp_path))
    with pytest.raises(nd.FusedEntryError, match="companion"):
        nd.check_fuse({**e, "fuse": {**e["fuse"], "companions": bad}}, "here")


def test_read_spec_refuses_a_spec_holding_a_bad_companion(tmp_path: Path) -> None:
    e = _fused(_rec(tmp_path), companions=[EDGE])
    e["fuse"]["companions"][0]["out_slots"] = [12]  # written without the check
    path = nd.write_spec(tmp_path / "spec.json", [e], {"f.cubin": b"x"})
    with pytest.raises(nd.FusedEntryError, match="companion .#0. that has a slot"):
        nd.read_spec(path)


# ---- a companion's image: the module image it was recorded from -------------------------------
IMG = nd.image_id(b"KFFAKE companions\0")


def test_a_companion_s_image_goes_to_the_spec_and_a_fifth_field(tmp_path: Path) -> None:
    e = _fused(_rec(tmp_path), companions=[EDGE._replace(image=IMG), MIX])
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"f.cubin": b"x"}))
    assert spec.entries[0]["fuse"]["companions"][0]["image"] == IMG
    assert "image" not in spec.entries[0]["fuse"]["companions"][1]  # any image
    line = nd.interposer_lines(spec).splitlines()[1].split("\t")
    assert len(line) == 14 + 2 * 5 and line[13] == "fuse:5:8:16:2:5"
    assert line[14:19] == ["_Z4edgePdii", EDGE.params.hex(), "-", "0", IMG]
    assert line[19:] == ["_Z3mixPKdPdi", MIX.params.hex(), "0", "8", "-"]


def test_companions_without_images_keep_four_fields(tmp_path: Path) -> None:
    """A spec written before companions had images reads and writes as it did."""
    e = _fused(_rec(tmp_path), companions=[EDGE, MIX])
    assert all("image" not in c for c in e["fuse"]["companions"])
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"f.cubin": b"x"}))
    line = nd.interposer_lines(spec).splitlines()[1].split("\t")
    assert len(line) == 14 + 2 * 4 and line[13] == "fuse:5:8:16:2"


def test_the_operator_path_carries_each_companion_s_image(tmp_path: Path) -> None:
    """apps/lift_companion.py's Companion -> its spec JSON -> deploy's Companion: the image
    survives (as operator_match.fused_spec reads fused_gpu's result)."""
    from dataclasses import replace

    from kernforge.apps import lift_companion as lc

    c = replace(lc.Companion("_Z4edgePdii", EDGE.params, (), (0,)), image=IMG)
    assert replace(c, faces=()).spec()["image"] == IMG
    back = nd.Companion(str(c.spec()["name"]), bytes.fromhex(str(c.spec()["params"])), (), (0,),
                        (), str(c.spec()["image"]))
    assert back == EDGE._replace(image=IMG)
    assert "image" not in lc.Companion("_Z4edgePdii", EDGE.params, (), (0,)).spec()


def test_recorded_image_id_of_a_sequence_launch_hashes_its_blob(tmp_path: Path) -> None:
    from dataclasses import replace

    blobs = {"img": b"KFFAKE image", "img-other-test": b"KFFAKE other\0"}
    rec = replace(_rec(tmp_path), loader=lambda b: np.frombuffer(blobs[b], dtype=np.uint8))
    other = nd.recorded_image_id(rec, "img-other-test")
    assert other == nd.image_id(blobs["img-other-test"])
    assert nd.recorded_image_id(rec) == nd.image_id(blobs["img"]) != other


@pytest.mark.parametrize("bad", ["", "0" * 16, "0" * 15 + "g", "1" * 15, "1" * 17, 7, None,
                                 " " + "1" * 15])
def test_companion_images_the_interposer_would_skip_are_refused(tmp_path: Path,
                                                                bad: Any) -> None:
    e = _fused(_rec(tmp_path), companions=[EDGE])
    comp = {**e["fuse"]["companions"][0], "image": bad}
    with pytest.raises(nd.FusedEntryError, match="image id") as info:
        nd.check_fuse({**e, "fuse": {**e["fuse"], "companions": [comp]}}, "here")
    assert info.value.hint
    if bad is not None:  # a Companion's None is no image: any
        with pytest.raises(nd.FusedEntryError, match="image id"):
            _fused(_rec(tmp_path), companions=[EDGE._replace(image=bad)])


# ---- a companion's geometry: the grid, block and shared memory it was recorded with ------------
GEO = ((1, 1, 1), (32, 1, 1), 0)


def test_a_companion_s_geometry_goes_to_the_spec_and_a_sixth_field(tmp_path: Path) -> None:
    e = _fused(_rec(tmp_path), companions=[EDGE._replace(geometry=GEO), MIX._replace(image=IMG)])
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"f.cubin": b"x"}))
    c0, c1 = spec.entries[0]["fuse"]["companions"]
    assert (c0["grid"], c0["block"], c0["shared_mem"]) == ([1, 1, 1], [32, 1, 1], 0)
    assert "grid" not in c1  # any geometry
    line = nd.interposer_lines(spec).splitlines()[1].split("\t")
    assert len(line) == 14 + 2 * 6 and line[13] == "fuse:5:8:16:2:6"
    assert line[14:20] == ["_Z4edgePdii", EDGE.params.hex(), "-", "0", "-", "1,1,1/32,1,1/0"]
    assert line[20:] == ["_Z3mixPKdPdi", MIX.params.hex(), "0", "8", IMG, "-"]


def test_the_operator_path_carries_each_companion_s_geometry() -> None:
    """lift_companion's Companion (as fused_steps records it) -> its evidence -> the spec's
    Companion (operator_match.fused_spec)."""
    from dataclasses import replace

    from kernforge.apps import lift_companion as lc
    from kernforge.apps.operator_match import _geometry

    c = replace(lc.Companion("_Z4edgePdii", EDGE.params, (), (0,)), geometry=GEO)
    ev = json.loads(json.dumps(c.evidence()))  # as the result file holds it
    assert _geometry(ev) == GEO
    assert _geometry(json.loads(json.dumps(lc.Companion("e", b"", (), (0,)).evidence()))) is None


@pytest.mark.parametrize("bad", [
    {"grid": [1, 1, 1]}, {"grid": [1, 1], "block": [1, 1, 1], "shared_mem": 0},
    {"grid": [0, 1, 1], "block": [1, 1, 1], "shared_mem": 0},
    {"grid": [1, 1, 1], "block": [1, 1, 2**31], "shared_mem": 0},
    {"grid": [1, 1, 1], "block": [1, 1, 1], "shared_mem": -1},
    {"grid": [1, 1, 1], "block": [1, 1, 1], "shared_mem": 2**32},
    {"grid": [1, 1, True], "block": [1, 1, 1], "shared_mem": 0},
    {"grid": "1,1,1", "block": [1, 1, 1], "shared_mem": 0},
])
def test_companion_geometries_the_interposer_would_skip_are_refused(
        tmp_path: Path, bad: dict[str, Any]) -> None:
    e = _fused(_rec(tmp_path), companions=[EDGE])
    comp = {**e["fuse"]["companions"][0], **bad}
    with pytest.raises(nd.FusedEntryError, match="geometry") as info:
        nd.check_fuse({**e, "fuse": {**e["fuse"], "companions": [comp]}}, "here")
    assert info.value.hint
