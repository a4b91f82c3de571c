"""GPU: sequence units (``kernforge record --sequence N``) of a heat time loop through the CUDA
runtime (linked statically: it reaches the driver through cuGetProcAddress), the loop of
test_defer_gpu.py: whatever the runtime calls between two launches must not end a sequence,
its first copy (after 37 steps) must, and the units replay verified on every buffer. And
the CuPy demo (examples/heat3d_cupy.py), whose stencil's sequence holds its boundary and
reduction kernels.

Run on the GPU machine: ``pytest -m gpu tests/record/test_sequence_gpu.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_defer_gpu import built  # noqa: F401  (the fixture: the loop built with nvcc)

from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeVariant
from kernforge.replay.native_child import run_isolated

pytestmark = pytest.mark.gpu


def test_runtime_launches_form_sequences_and_replay(built: Path, tmp_path: Path) -> None:  # noqa: F811
    status, units, problems, _ = record_command([str(built / "loop"), "100"], tmp_path / "r",
                                                sequence=5, max_instances=2)
    assert status == 0 and not problems
    recs = [read_native(u) for u in sorted(units)]
    assert [(r.name, r.sequence["steps"], r.sequence["ended"]) for r in recs] == \
        [("heat", 5, "complete")] * 2
    for r in recs:
        assert len(r.steps) == 5 and r.written == (0, 1)
        out = run_isolated(r.path, [NativeVariant(), NativeVariant(block=(128, 1, 1))],
                           repeat=5, warmup=2)
        assert [m.status.value for m in out["measurements"]] == ["OK", "OK"], out
        # replayed at the recorded addresses, or relocated (verified above) only where the
        # driver reserved the range elsewhere (the replay process's own mappings may sit
        # there: seen on the H200, 2026-12-07)
        assert all("the driver offered" in why for why in out["refusals"]), out["refusals"]
        assert bool(out["relocated"]) == bool(out["refusals"]), out


def test_the_first_copy_ends_a_sequence(built: Path, tmp_path: Path) -> None:  # noqa: F811
    status, units, problems, _ = record_command([str(built / "loop"), "100"], tmp_path / "r",
                                                sequence=45, max_instances=1)
    assert status == 0 and not problems
    (rec,) = [read_native(u) for u in units]
    assert rec.sequence["steps"] == 37, rec.sequence
    assert rec.sequence["ended"] == "a driver call that could observe memory"
    out = run_isolated(rec.path, [NativeVariant()], repeat=5, warmup=2)
    assert out["measurements"][0].status.value == "OK", out


def test_the_cupy_demo_records_a_sequence_with_its_boundary_kernels(tmp_path: Path) -> None:
    """examples/heat3d_cupy.py: per step the stencil, three boundary launches and a two-kernel
    reduction (RawKernel, RawModule), all on one stream: the stencil's sequence of 5 steps holds
    the 4 steps between its first and fifth launch whole, 25 launches."""
    pytest.importorskip("cupy")
    demo = Path(__file__).resolve().parents[2] / "examples" / "heat3d_cupy.py"
    status, units, problems, _ = record_command(
        [sys.executable, str(demo), "--n", "64", "--steps", "12"], tmp_path / "r", sequence=5,
        max_instances=1, kernels="heat_stencil")
    assert status == 0 and not problems
    (rec,) = [read_native(u) for u in units]
    assert rec.name == "heat_stencil" and rec.source is not None  # NVRTC's, through CuPy
    assert rec.sequence == {"requested": 5, "steps": 5, "ended": "complete"}, rec.sequence
    assert len(rec.steps) == 25, [s.entry for s in rec.steps]
    out = run_isolated(rec.path, [NativeVariant()], repeat=5, warmup=2)
    assert out["measurements"][0].status.value == "OK", out
