"""What a native deployment entry's kernel assumed, as the spec holds it and the line file
carries it (deploy/native_guards.py): the launch attributes a fused entry's launches were
recorded with, and the module globals an entry's kernel baked in."""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_native_fused import EDGE, MIX, _fused, _rec

from kernforge.core import ConfigError
from kernforge.deploy import native as nd
from kernforge.deploy.native_guards import Guard, guard_for

CLUSTER = struct.pack("<II3I52x", 4, 0, 2, 1, 1)  # CUlaunchAttribute: cluster dimensions 2,1,1
PRIORITY = struct.pack("<IIi60x", 8, 0, 1)
COEF = struct.pack("<4d", 0.5, 0.25, 0.25, 0.5)  # a __constant__ table the operator baked in


def _lines(tmp_path: Path, *entries: dict[str, Any]) -> list[list[str]]:
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", list(entries), {"f.cubin": b"x"}))
    return [ln.split("\t") for ln in nd.interposer_lines(spec).splitlines()[1:]]


def test_a_recording_s_launch_attributes_go_to_the_spec_and_an_attrs_field(
        tmp_path: Path) -> None:
    rec = replace(_rec(tmp_path), launch_attrs=(CLUSTER,))
    e = _fused(rec, companions=[EDGE, MIX._replace(attrs=(PRIORITY,))])
    assert e["launch_attrs"] == [CLUSTER.hex()]
    assert e["fuse"]["companions"][1]["launch_attrs"] == [PRIORITY.hex()]
    line = _lines(tmp_path, e)[0]
    assert len(line) == 14 + 2 * 4 + 2 and line[13] == "fuse:5:8:16:2"
    assert line[22:] == [f"attrs:0:{CLUSTER.hex()}", f"attrs:2:{PRIORITY.hex()}"]


def test_launches_recorded_without_attributes_write_no_attrs_field(tmp_path: Path) -> None:
    e = _fused(_rec(tmp_path), companions=[EDGE])
    assert "launch_attrs" not in e and "launch_attrs" not in e["fuse"]["companions"][0]
    assert len(_lines(tmp_path, e)[0]) == 14 + 4


@pytest.mark.parametrize("bad", [["00" * 71], ["zz" * 72], [CLUSTER.hex()] * 17, "00" * 72,
                                 [72]], ids=["71 bytes", "not hex", "17", "a string",
                                             "a number"])
def test_launch_attributes_the_interposer_would_skip_are_refused(tmp_path: Path,
                                                                 bad: Any) -> None:
    e = _fused(_rec(tmp_path), companions=[EDGE])
    with pytest.raises(nd.FusedEntryError, match="launch_attrs"):
        nd.check_fuse({**e, "launch_attrs": bad}, "here")
    comp = {**e["fuse"]["companions"][0], "launch_attrs": bad}
    with pytest.raises(nd.FusedEntryError, match="launch_attrs"):
        nd.check_fuse({**e, "fuse": {**e["fuse"], "companions": [comp]}}, "here")


def test_the_operator_path_carries_each_companion_s_attributes() -> None:
    """lift_companion's Companion (as fused_steps records it) -> its evidence -> the spec's
    Companion (operator_match.fused_spec reads launch_attrs back)."""
    from kernforge.apps import lift_companion as lc

    c = replace(lc.Companion("_Z4edgePdii", EDGE.params, (), (0,)), attrs=(PRIORITY,))
    ev = json.loads(json.dumps(c.evidence()))
    assert ev["launch_attrs"] == [PRIORITY.hex()] and nd.companion_problem(c.spec()) is None
    assert "launch_attrs" not in lc.Companion("e", b"", (), (0,)).spec()


# ---- guarded globals ---------------------------------------------------------------------------
def test_guards_go_to_the_spec_and_guard_fields_of_fused_and_one_launch_entries(
        tmp_path: Path) -> None:
    rec = _rec(tmp_path)
    g = guard_for("coef", COEF, image="00000000000000ab")
    assert g == Guard("coef", 32, nd.image_id(COEF), "00000000000000ab")
    fused = _fused(rec, companions=[EDGE], guards=[g, guard_for("dt", struct.pack("<d", 0.1))])
    one = nd.replacement_entry(rec, image="f.cubin", image_bytes=b"x", entry_name="solve_t",
                               grid=(4, 1, 1), block=(128, 1, 1), shared_mem=0, carveout=None,
                               evidence={}, guards=[g])
    assert fused["guards"][0] == {"symbol": "coef", "size": 32, "hash": nd.image_id(COEF),
                                  "image": "00000000000000ab"}
    a, b = _lines(tmp_path, fused, one)
    assert a[18:] == [f"guard:00000000000000ab:32:{nd.image_id(COEF)}:coef",
                      f"guard:-:8:{nd.image_id(struct.pack('<d', 0.1))}:dt"]
    assert len(b) == 15 and b[13] == "-" and b[14] == a[18]  # field 14: no fusion


def test_entries_without_guards_write_the_lines_of_before(tmp_path: Path) -> None:
    one = nd.entry(_rec(tmp_path), {"block": [128, 1, 1]}, "f.cubin", b"x", {})
    assert "guards" not in one and len(_lines(tmp_path, one)[0]) == 13


@pytest.mark.parametrize("bad", [
    {"symbol": "c", "size": 0, "hash": "1" * 16}, {"symbol": "c", "size": 2**20 + 1,
                                                   "hash": "1" * 16},
    {"symbol": "c", "size": True, "hash": "1" * 16}, {"symbol": "c", "size": 8, "hash": "1" * 15},
    {"symbol": "c\tx", "size": 8, "hash": "1" * 16}, {"symbol": "", "size": 8, "hash": "1" * 16},
    {"symbol": "c", "size": 8, "hash": "1" * 16, "image": "0" * 16},
    {"symbol": "c", "size": 8}, {"symbol": "c", "size": 8, "hash": "1" * 16, "value": 1},
], ids=["size 0", "past 1 MiB", "size True", "short hash", "a tab", "no symbol", "image 0",
        "no hash", "another key"])
def test_guards_the_interposer_would_skip_are_refused(tmp_path: Path, bad: Any) -> None:
    e = {**_fused(_rec(tmp_path)), "guards": [bad]}
    with pytest.raises(ConfigError, match="guard") as info:
        nd.check_guards(e, "here")
    assert info.value.hint


def test_read_spec_refuses_twice_the_same_global_or_nine(tmp_path: Path) -> None:
    g = guard_for("coef", COEF)
    for guards in ([g, g], [guard_for(f"g{i}", COEF) for i in range(9)]):
        e = _fused(_rec(tmp_path))
        e["guards"] = [x.as_json() for x in guards]  # written without the check
        with pytest.raises(ConfigError, match="guard"):
            nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"f.cubin": b"x"}))
