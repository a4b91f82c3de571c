"""The demo application's whole step fused for real (GPU, CuPy): examples/heat3d_cupy.py
recorded as a sequence unit (``--diag-every 0``), its stencil recognized, its three
``apply_boundary`` launches per step lifted to face rules on the device and folded, and the
fused operator verified against the recorded steps (all four kernels per step) from the
recorded state and from fresh inputs; the temporal design's candidates with the faces folded
among them.

On a GPU machine: ``pytest -m gpu tests/apps/test_fused_faces_gpu.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernforge.apps.operator_match import FusedMatch, fuse_unit
from kernforge.deploy import native as nd
from kernforge.pipeline.run_app import record_command

pytestmark = pytest.mark.gpu

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "heat3d_cupy.py"


def test_the_demo_step_with_its_boundary_kernels_is_fused(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    cmd = [sys.executable, str(EXAMPLE), "--n", "128", "--steps", "12", "--diag-every", "0"]
    status, units, problems, _ = record_command(cmd, tmp_path / "rec", kernels="heat_stencil",
                                                max_instances=1, skip=2, sequence=6)
    assert status == 0 and not problems and len(units) == 1
    m = fuse_unit(units[0], out_dir=tmp_path / "f", steps=(3, 5), band=-1.0, repeat=5,
                  passes=3)
    assert isinstance(m, FusedMatch), m
    assert "boundary kernels folded: [z=0 := 1.0, z=n-1 := z-1]; [y=0 := y+1, y=n-1 := y-1]; " \
           "[x=0 := x+1, x=n-1 := x-1]" in m.note, m.note
    assert any("fresh input" in c for c in m.note.split("; ")), m.note
    (e,) = nd.read_spec(m.spec_path).entries
    comps = e["evidence"]["companions"]
    assert [c["name"] for c in comps] == ["apply_boundary"] * 3
    assert all(c["out_slots"] == [0] and c["in_slots"] == [] for c in comps)
    print(f"fused {m.steps} steps: {m.speedup:.3f}x [{m.ci[0]:.3f}, {m.ci[1]:.3f}]")


def test_the_demo_default_step_elides_its_reduction(tmp_path: Path) -> None:
    """``--diag-every 1`` (the default): the two reduction launches of every step are elided,
    the fused operator checked as T fused steps and one recorded step against T+1 recorded
    steps on every region (``partial`` and ``out`` included); the spec lists all five
    companions in launch order, each with its role."""
    pytest.importorskip("cupy")
    cmd = [sys.executable, str(EXAMPLE), "--n", "128", "--steps", "14"]
    status, units, problems, _ = record_command(cmd, tmp_path / "rec", kernels="heat_stencil",
                                                max_instances=1, skip=2, sequence=7)
    assert status == 0 and not problems and len(units) == 1
    m = fuse_unit(units[0], out_dir=tmp_path / "f", steps=(3, 5), band=-1.0, repeat=5,
                  passes=3)
    assert isinstance(m, FusedMatch), m
    assert "elided (the held step re-runs them): _Z15sq_diff_partial" in m.note, m.note
    assert "on every region written (2 elided outputs included)" in m.note, m.note
    (e,) = nd.read_spec(m.spec_path).entries
    comps = e["evidence"]["companions"]
    assert [c["role"] for c in comps] == ["folded"] * 3 + ["elided"] * 2
    assert [c["name"].split("I")[0] for c in comps[3:]] == ["_Z15sq_diff_partial",
                                                           "_Z12sum_partials"]
    assert len(e["fuse"]["companions"]) == 5
    print(f"fused {m.steps} steps with the reduction elided: {m.speedup:.3f}x "
          f"[{m.ci[0]:.3f}, {m.ci[1]:.3f}]")


def test_the_demo_step_folds_into_the_temporal_design(tmp_path: Path) -> None:
    """The temporal design with the demo's face rules for T = 3, 5, 7: every candidate built
    and run; those of the temporal design pass the check against the recorded steps (they are
    exact on copied faces, like overlapped tiling's), each with its screen speedup."""
    pytest.importorskip("cupy")
    cmd = [sys.executable, str(EXAMPLE), "--n", "128", "--steps", "16", "--diag-every", "0"]
    status, units, problems, _ = record_command(cmd, tmp_path / "rec", kernels="heat_stencil",
                                                max_instances=1, skip=2, sequence=8)
    assert status == 0 and not problems and len(units) == 1
    m = fuse_unit(units[0], out_dir=tmp_path / "f", steps=(3, 5, 7), band=-1.0, repeat=5,
                  passes=3)
    assert isinstance(m, FusedMatch), m
    rows = [r for r in m.tried if str(r["operator"]).startswith("temporal[")]
    assert {r["steps"] for r in rows} == {3, 5, 7}, m.tried
    passed = [r for r in rows if "refused" not in r]
    for r in rows:
        print(r["steps"], r["operator"], r.get("screen_speedup"), r.get("refused", ""))
    assert {r["steps"] for r in passed} == {3, 5, 7}, rows
    print(f"chosen T={m.steps}: {m.speedup:.3f}x [{m.ci[0]:.3f}, {m.ci[1]:.3f}]; {m.note}")
