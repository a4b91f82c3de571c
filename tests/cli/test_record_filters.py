"""``kernforge record --kernels PATTERN`` that matches none of the kernels the application
launched (a typo, a part of a name without ``*``): bad input (exit 2) naming the kernels that
did run, not an empty recording that exits 0 saying nothing reached the CUDA driver."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernforge.record import find_recordings
from kernforge.testing.fakedriver import FakeCuda

from .cli_helpers import run

APP = r'''
import numpy as np
import kernforge

SRC = """
def axpy(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = a * x[:n] + y[:n]
"""
k = kernforge.Kernel(SRC, "axpy", backend="null")
x, y = np.ones(64), np.zeros(64)
for _ in range(3):
    k(x, y, 0.5, 64)
'''


def _said(capsys: pytest.CaptureFixture[str]) -> str:
    out = capsys.readouterr()
    return " ".join((out.out + out.err).split())


def test_a_pattern_matching_no_launched_kernel_of_a_python_app_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP)
    assert run("record", "-o", str(tmp_path / "r"), "--kernels", "apxy", "--",
               sys.executable, str(app)) == 2
    said = _said(capsys)
    assert "no kernel the application launched matches --kernels 'apxy'" in said
    assert "the kernels it launched: axpy" in said and "Traceback" not in said
    assert "nothing was launched through the CUDA driver" not in said
    assert find_recordings(tmp_path / "r") == []
    # the same pattern, right: recorded as before
    assert run("record", "-o", str(tmp_path / "ok"), "--kernels", "ax*", "--",
               sys.executable, str(app)) == 0
    units = find_recordings(tmp_path / "ok")
    assert units and all(u.name.startswith("axpy-") for u in units)


def test_a_pattern_matching_no_launched_kernel_of_a_native_program_exits_2(
        on_fake: FakeCuda, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("record", "-o", str(tmp_path / "r"), "--kernels", "nomatch", "--",
               *on_fake.command(2)) == 2
    said = _said(capsys)
    assert "no kernel the application launched matches --kernels 'nomatch'" in said
    assert "the kernels it launched: " in said and "heat" in said
    assert find_recordings(tmp_path / "r") == []


def test_filters_that_leave_out_every_launch_of_matching_kernels_still_exit_0(
        on_fake: FakeCuda, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--skip past every launch of a kernel the pattern does match is no typo: exit 0."""
    assert run("record", "-o", str(tmp_path / "r"), "--kernels", "*heat*", "--skip", "1000",
               "--", *on_fake.command(2)) == 0
    assert "recorded 0 kernel launch(es)" in _said(capsys)
