"""Operator matching's GPU half against the fake CUDA driver: a recorded native unit replayed,
probed and refused with the probe's reason, in-process and through match_unit's child."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.apps.operator_gpu import ReplayTarget
from kernforge.apps.operator_match import NoMatch, match_unit
from kernforge.apps.probe import NotAStencil, recognize
from kernforge.backends.driver import Driver
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeReplay
from kernforge.testing.fakedriver import FakeCuda


def test_the_replayed_unit_is_probed_and_its_1d_stencil_refused(fake: FakeCuda,
                                                                 heat_unit: Path) -> None:
    rec = read_native(heat_unit)
    t = ReplayTarget(NativeReplay(rec, Driver(library=str(fake.libdir / "libcuda.so.1"))))
    assert [b.written for b in t.buffers] == [False, True] and 1000 in t.ints
    r = recognize(t)
    assert isinstance(r, NotAStencil), r
    assert "1D stencil" in r.reason and "float64" in r.reason and "boundary copy" in r.reason


def test_match_unit_reports_the_reason_from_its_child_process(
        fake: FakeCuda, heat_unit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNFORGE_LIBCUDA", str(fake.libdir / "libcuda.so.1"))
    m = match_unit(heat_unit, out_dir=tmp_path / "m")
    assert isinstance(m, NoMatch) and "1D stencil" in m.reason
    assert isinstance(match_unit(tmp_path, out_dir=tmp_path / "m"), NoMatch)  # not a unit
    m = match_unit(heat_unit.parent / "gather-0", out_dir=tmp_path / "m")  # double **rows
    assert isinstance(m, NoMatch) and "table of pointers" in m.reason


def test_matching_replays_on_the_driver_the_manifest_env_names(
        fake: FakeCuda, heat_unit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M3a matches in this process's children, which a manifest's env = { LD_LIBRARY_PATH }
    does not reach: the driver it names is given as KERNFORGE_LIBCUDA while matching."""
    import os

    from kernforge.apps.recording import app_driver
    from kernforge.apps.strategies.operator import driver_of

    monkeypatch.delenv("KERNFORGE_LIBCUDA", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))  # no driver there
    env = {"LD_LIBRARY_PATH": f"/nonexistent:{fake.libdir}"}
    assert app_driver(env) == str(fake.libdir / "libcuda.so.1")
    assert app_driver({"KERNFORGE_LIBCUDA": "/x/libcuda.so"}) == "/x/libcuda.so"
    assert app_driver({}) is None
    with driver_of(env):
        m = match_unit(heat_unit, out_dir=tmp_path / "m1")
    assert isinstance(m, NoMatch) and "1D stencil" in m.reason, m.reason
    assert "KERNFORGE_LIBCUDA" not in os.environ


def test_no_launch_says_when_the_machine_has_no_cuda_driver(fake: FakeCuda) -> None:
    import ctypes.util

    from kernforge.apps.recording import no_launch_reason

    with_driver = no_launch_reason({"LD_LIBRARY_PATH": str(fake.libdir)})
    assert with_driver == "no kernel launch was seen (nothing kernforge can replace)"
    if ctypes.util.find_library("cuda") is None:  # this machine: no driver at all
        assert "this machine has no CUDA driver" in no_launch_reason({})
    else:
        assert no_launch_reason({}) == with_driver
