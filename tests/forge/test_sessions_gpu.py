"""The forge's GPU sessions: the rounds load nvcc cubins, the final pass the deployed (NVRTC)
build, on a real GPU (``pytest -m gpu tests/forge``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.stencil import matrix as mx
from kernforge.stencil.spec import Cell

pytestmark = pytest.mark.gpu

CELL = Cell.parse("star_1/96x64x32/fp32")


def test_a_deployed_session_builds_with_nvrtc_the_rounds_load_the_cubin(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    from kernforge.forge.compile import compile_all
    from kernforge.forge.measure import GpuDevice
    from kernforge.forge.sessions import gpu_sessions

    op = mx.build("zmarch", CELL, mx.defaults("zmarch", CELL))
    assert op is not None
    [built] = compile_all([op], tmp_path / "cubins")
    assert built.ok, built.log
    device = GpuDevice()
    times = {}
    for deployed in (False, True):
        with gpu_sessions(device, CELL, deployed=deployed) as session:
            ok, _err, detail = session.check(built)
            assert ok, detail
            times[deployed] = session.screen(built)
            loaded = session._runners[op.key].loaded
            # measure.load (NVRTC) reports local memory; load_cubin does not
            assert ("local_bytes" in loaded.info[op.entries()[0]]) is deployed
    assert all(t > 0 for t in times.values())


def test_the_forge_final_pass_times_the_deployed_build(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    from kernforge.forge.run import forge_run

    summary = forge_run([CELL], tmp_path / "out", start_table=None, rounds=1,
                        changes=["design"], cache=tmp_path / "cubins", say=lambda m: None)
    assert summary["final"], summary
    assert all(r["build"] == "deployed" for r in summary["final"])
    assert "in the deployed build (NVRTC)" in (tmp_path / "out" / "ideas.md").read_text() \
        or not any(r["changed"] for r in summary["final"])
