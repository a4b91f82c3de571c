"""compile_all: parallel nvcc to cubins, cached by source, failures reported with the log."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from kernforge.forge.compile import compile_all
from kernforge.stencil import matrix as mx
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def test_compile_all_caches_and_reports_failures(tmp_path: Path) -> None:
    cell = Cell(STENCILS["star_1"], Shape(64, 32, 16), Precision.FP32)
    good = mx.operator_for(cell, table={})
    bad = replace(good, source=good.source.replace("const long", "const lng", 1))
    first = compile_all([good, bad, good], tmp_path)
    assert [b.ok for b in first] == [True, False, True]
    assert first[0].cubin is not None and first[0].cubin.read_bytes()[:4] == b"\x7fELF"
    assert "lng" in first[1].log
    again = compile_all([good], tmp_path)
    assert again[0].cubin == first[0].cubin and again[0].seconds == 0.0  # from the cache
    assert not list(Path(tmp_path).glob("tmp*"))  # no temporary directory left behind
