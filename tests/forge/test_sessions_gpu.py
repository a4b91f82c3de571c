"""The forge's builds on a real GPU (``pytest -m gpu tests/forge``): nvcc cubins, and NVRTC
builds made as dispatch makes them (forge/nvrtc.py), which the sessions load from CuPy's cache;
the final pass of either kind of run times the deployed build."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kernforge.stencil import matrix as mx
from kernforge.stencil.spec import Cell

pytestmark = pytest.mark.gpu

CELL = Cell.parse("star_1/96x64x32/fp32")


def test_a_session_loads_cubins_from_nvcc_and_deployed_builds_with_nvrtc(
        tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    from kernforge.forge.compile import compile_all
    from kernforge.forge.measure import GpuDevice
    from kernforge.forge.nvrtc import build_deployed
    from kernforge.forge.sessions import gpu_sessions

    op = mx.build("zmarch", CELL, mx.defaults("zmarch", CELL))
    assert op is not None
    [cubin] = compile_all([op], tmp_path / "cubins")
    [deployed] = build_deployed([op], jobs=1)
    assert cubin.ok and deployed.ok, (cubin.log, deployed.log)
    with gpu_sessions(GpuDevice(), CELL) as session:
        for built, nvrtc in ((cubin, False), (deployed, True)):
            session._runners.clear()
            ok, _err, detail = session.check(built)
            assert ok, detail
            assert session.screen(built) > 0
            loaded = session._runners[op.key].loaded
            # measure.load (NVRTC) reports local memory; load_cubin does not
            assert ("local_bytes" in loaded.info[op.entries()[0]]) is nvrtc


def test_nvrtc_builds_in_workers_are_what_a_session_loads(tmp_path: Path) -> None:
    """build_deployed compiles in spawned workers (CuPy's RawModule); a session then loads the
    operator as dispatch does (measure.load, from CuPy's kernel cache)."""
    pytest.importorskip("cupy")
    from kernforge.forge.measure import GpuDevice
    from kernforge.forge.nvrtc import build_deployed
    from kernforge.forge.sessions import gpu_sessions

    ops = [mx.build("zmarch", CELL, {**mx.defaults("zmarch", CELL), "lz": lz})
           for lz in (4, 8)]
    bad = dataclasses.replace(ops[0], source=ops[0].source + "\nnot C++;\n")
    built = build_deployed([*ops, bad], jobs=2)
    assert [b.ok for b in built] == [True, True, False] and built[0].deployed
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
