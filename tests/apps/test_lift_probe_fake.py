"""Lifting by probing through operator matching's replay target, against the fake CUDA driver:
the recorded unit's 1D kernel lifted in-process, and through the GPU benchmark's child."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernforge.apps.lift_probe import Probed, lift_probe
from kernforge.apps.operator_gpu import ReplayTarget
from kernforge.backends.driver import Driver
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeReplay
from kernforge.stencil.program import expr as ex
from kernforge.testing.fakedriver import FakeCuda

ROOT = Path(__file__).resolve().parents[2]


def test_the_replayed_unit_lifts_to_a_1d_program(fake: FakeCuda, heat_unit: Path) -> None:
    rec = read_native(heat_unit)
    t = ReplayTarget(NativeReplay(rec, Driver(library=str(fake.libdir / "libcuda.so.1"))))
    r = lift_probe(t)
    assert isinstance(r, Probed), r
    p = r.program
    assert (p.dims, p.precision, r.dtype) == (1, "fp64", "float64")
    assert [f.role for f in p.fields] == ["in", "out"]
    assert p.rule("x-").rule == "copy" and p.outputs[0].copy_from == "p0"
    assert sum(ex.polynomial(p.outputs[0].expr).values()) == pytest.approx(1.0)


def test_the_benchmark_child_prints_the_program(fake: FakeCuda, heat_unit: Path,
                                                tmp_path: Path) -> None:
    env = {"KERNFORGE_LIBCUDA": str(fake.libdir / "libcuda.so.1"),
           "PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "lift_units.py"),
                        f"{heat_unit.parent}:heat", "--json", str(tmp_path / "l.json")],
                       capture_output=True, text=True, env=env, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    res = json.loads((tmp_path / "l.json").read_text())
    (one,) = res.values()
    assert "refused" not in one and one["shape"][0] > 8 and one["runs"] > 3, one
    assert "1D fp64" in one["program"]
