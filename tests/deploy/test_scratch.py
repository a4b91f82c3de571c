"""The problem key leaves out the bytes a kernel writes before reading (CuPy CIndexer slots)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.core.native import NativeParam, NativeRecording, NativeSource
from kernforge.deploy import native as nd
from kernforge.deploy.scratch import param_types, scratch_ranges

# the shape of a cupyx.scipy.ndimage kernel as CuPy hands it to NVRTC
ZOOM = """#include <cupy/carray.cuh>
typedef float W;
extern "C" __global__ void zoom3(const CArray<float, 3, 1, 1> x, const CArray<float, 1, 1, 1> z,
                                 CArray<float, 1, 1, 1> _raw_y, CIndexer<1, 1> _ind) {
  ;
}
"""
SIZES = (64, 32, 32, 24)


def _words(*values: int) -> bytes:
    return b"".join(v.to_bytes(8, "little") for v in values)


def _rec(tmp_path: Path, code: str | None, entry: str = "zoom3",
         sizes: tuple[int, ...] = SIZES, garbage: int = 0x7FBCC5D139F0) -> NativeRecording:
    raw = (_words(0x7000, 2097152, 128, 128, 128, 65536, 512, 4)
           + _words(0x9000, 3, 3, 4) + _words(0xA000, 10360232, 10360232, 4))
    raw += _words(10360232, 10360232, garbage)[: sizes[3]]
    offs = [sum(sizes[:i]) for i in range(len(sizes))]
    params = tuple(NativeParam(o, s, ((o, i),) if i < 3 else ())
                   for i, (o, s) in enumerate(zip(offs, sizes)))
    src = NativeSource(origin="nvrtc", code=code) if code is not None else None
    return NativeRecording(tmp_path / "unit", entry, entry, "img", "cubin", (80940, 1, 1),
                           (128, 1, 1), 0, params, raw, (), source=src)


def test_the_cindexer_index_slots_are_left_out_of_the_key(tmp_path: Path) -> None:
    rec = _rec(tmp_path, ZOOM)
    assert param_types(ZOOM, "zoom3") == ["CArray<float, 3, 1, 1>", "CArray<float, 1, 1, 1>",
                                          "CArray<float, 1, 1, 1>", "CIndexer<1, 1>"]
    assert scratch_ranges(rec) == ((144, 8),)
    key = nd.problem_key(rec)
    assert len(key) == 2 * 152 and key.endswith("x" * 16)
    assert key[2 * 128:2 * 144] == _words(10360232, 10360232).hex()  # count and extent compared
    # two runs that differ only in the unset slots have one key
    assert nd.problem_key(_rec(tmp_path, ZOOM, garbage=0x1234)) == key


def test_the_key_never_grows_past_the_parameter_buffer(tmp_path: Path) -> None:
    rec = _rec(tmp_path, ZOOM)
    short = NativeRecording(rec.path, rec.entry, rec.name, rec.image, rec.image_kind, rec.grid,
                            rec.block, 0, rec.params, rec.param_bytes[:140], (),
                            source=rec.source)
    assert len(nd.problem_key(short)) == 2 * 140


def test_a_3d_indexer_leaves_out_its_three_slots(tmp_path: Path) -> None:
    code = ZOOM.replace("CIndexer<1, 1>", "CIndexer<3>")
    rec = _rec(tmp_path, code, sizes=(64, 32, 32, 56))
    assert scratch_ranges(rec) == ((128 + 32, 24),)


@pytest.mark.parametrize("code, entry, sizes", [
    (None, "zoom3", SIZES),  # no captured source: nothing is known
    (ZOOM, "_Z5zoom3v", SIZES),  # a name the source does not declare
    (ZOOM, "zoom3", (64, 32, 32, 20)),  # a size that is not the indexer's layout
    (ZOOM.replace("CIndexer<1, 1>", "CIndexer<0>"), "zoom3", SIZES),
    (ZOOM.replace("CIndexer<1, 1>", "MyIndexer<1, 1>"), "zoom3", SIZES),
    (ZOOM.replace("#include <cupy/carray.cuh>", ""), "zoom3", SIZES),  # not CuPy's CIndexer
    (ZOOM.replace("CIndexer<1, 1> _ind", "CIndexer<1, 1> &_ind"), "zoom3", SIZES),
])
def test_nothing_is_left_out_without_a_known_indexer(tmp_path: Path, code: str | None,
                                                     entry: str,
                                                     sizes: tuple[int, ...]) -> None:
    rec = _rec(tmp_path, code, entry, sizes)
    assert scratch_ranges(rec) == ()
    assert "x" not in nd.problem_key(rec)[2 * 128:]
