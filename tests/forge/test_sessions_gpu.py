"""The forge's GPU sessions: the rounds load nvcc cubins, the final pass the deployed (NVRTC)
build, on a real GPU (``pytest -m gpu tests/forge``)."""

from __future__ import annotations

import dataclasses
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


def test_nvrtc_builds_in_workers_are_what_a_session_loads(tmp_path: Path) -> None:
    """build_deployed compiles in spawned workers (CuPy's RawModule); a session then loads the
    operator as dispatch does (measure.load, from CuPy's kernel cache)."""
    pytest.importorskip("cupy")
    from kernforge.forge.measure import GpuDevice
    from kernforge.forge.nvrtc import DEPLOYED, build_deployed
    from kernforge.forge.sessions import gpu_sessions

    ops = [mx.build("zmarch", CELL, {**mx.defaults("zmarch", CELL), "lz": lz})
           for lz in (4, 8)]
    bad = dataclasses.replace(ops[0], source=ops[0].source + "\nnot C++;\n")
    built = build_deployed([*ops, bad], jobs=2)
    assert [b.ok for b in built] == [True, True, False] and built[0].cubin == DEPLOYED
    assert "not C++" in built[2].log or "error" in built[2].log.lower()
    with gpu_sessions(GpuDevice(), CELL) as session:
        for b in built[:2]:
            ok, _err, detail = session.check(b)
            assert ok, detail
            assert "local_bytes" in session._runners[b.op.key].loaded.info[b.op.entries()[0]]


@pytest.mark.parametrize("build", ["nvrtc", "nvcc"])
def test_the_forge_final_pass_times_the_deployed_build(tmp_path: Path, build: str) -> None:
    pytest.importorskip("cupy")
    from kernforge.forge.run import forge_run

    summary = forge_run([CELL], tmp_path / "out", start_table=None, rounds=1,
                        changes=["design"], cache=tmp_path / "cubins", say=lambda m: None,
                        build=build)
    assert summary["final"], summary
    assert all(r["build"] == "deployed" for r in summary["final"])
    assert (tmp_path / "cubins").exists() == (build == "nvcc")
