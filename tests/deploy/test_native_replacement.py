"""A native deployment entry that runs another function of its image (an operator adapter)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernforge.core import ConfigError
from kernforge.core.native import NativeParam, NativeRecording, NativeRegion
from kernforge.deploy import native as nd


def _rec(tmp_path: Path) -> NativeRecording:
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


def test_a_replacement_entry_names_its_function_geometry_and_shared_memory(
        tmp_path: Path) -> None:
    rec = _rec(tmp_path)
    e = nd.replacement_entry(rec, image="adapter.cubin", image_bytes=b"\x7fELF...",
                             entry_name="kf_adapter_0123", grid=(4, 16, 3), block=(32, 8, 1),
                             shared_mem=1024, carveout=None, evidence={"speedup": 1.3})
    assert e["key"] == "40000000" + "00" * 4 + "x" * 32  # n compared, pointers not
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e],
                                      {"adapter.cubin": b"\x7fELF..."}))
    line = nd.interposer_lines(spec).splitlines()[1].split("\t")
    assert line[0] == "_Z5solvejPdS_" and line[1:4] == ["16,1,1", "256,1,1", "0"]
    assert line[6:] == ["kf_adapter_0123", "-", "4,16,3", "32,8,1", "1024", "-1",
                        nd.image_id(b"KFFAKE image")]


def test_entries_without_a_replacement_function_run_the_recorded_one(tmp_path: Path) -> None:
    rec = _rec(tmp_path)
    e = nd.entry(rec, {"block": [128, 1, 1], "carveout": 0}, "k.cubin", b"x", {})
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"k.cubin": b"x"}))
    line = nd.interposer_lines(spec).splitlines()[1].split("\t")
    assert line[6:] == ["_Z5solvejPdS_", "-", "32,1,1", "128,1,1", "0", "0",
                        nd.image_id(b"KFFAKE image")]


def test_the_image_id_is_the_interposers_fnv1a() -> None:
    # FNV-1a 64 reference values: the empty input is the offset basis; "a" a published vector
    assert nd.image_id(b"") == "cbf29ce484222325"
    assert nd.image_id(b"a") == "af63dc4c8601ec8c"


def test_lines_refuse_what_the_interposer_would_skip(tmp_path: Path) -> None:
    """An entry the interposer would skip (a JIT option it does not apply, a field with a line
    break) is refused when the line file is written, with the reason."""
    rec = _rec(tmp_path)
    for variant, match in (({"jit": {"max_registers": 64, "fast_math": 1}}, "fast_math"),
                           ({"jit": {}}, "line break")):
        e = nd.entry(rec, {"block": [128, 1, 1], **variant}, "k.cubin", b"x", {})
        if match == "line break":
            e["kernel"] = "_Z5solve\r"
        spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"k.cubin": b"x"}))
        with pytest.raises(ConfigError, match=match):
            nd.interposer_lines(spec)
    ok = nd.entry(rec, {"block": [128, 1, 1], "jit": {"max_registers": 64,
                                                       "optimization_level": 3}},
                  "k.cubin", b"x", {})
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [ok], {"k.cubin": b"x"}))
    assert nd.interposer_lines(spec).splitlines()[1].split("\t")[7] == "0=64,7=3"
