"""Operators for stencils with a fused reduction (a Jacobi step and its residual): the blocks'
partials combined by one atomic per block (knob ``atomic``) or by the last block, on the host
emulator against the float64 oracle and against the emulated original kernel; what nvcc makes
of them; the candidates the workflow tries first."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from kernforge.apps.lift_probe import Probed, lift_probe
from kernforge.apps.program_binding import bind_probed
from kernforge.backends.cuda_image import compile_cubin, nvcc
from kernforge.stencil import emulate as em
from kernforge.stencil.program import Reduction, apply, program, tap
from kernforge.stencil.program import codegen_plain as plain
from kernforge.stencil.program import codegen_tiled as tiled
from kernforge.stencil.program.binding import Binding, Placement
from kernforge.stencil.program.codegen import Context, Refused, standalone
from kernforge.stencil.program.designs import candidates

from .lift_kernels import CASES, EmulatedTarget
from .program_ops_helpers import lifted, run_standalone
from .test_program_ops import _compare

pytestmark = pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")

DTYPE = {"fp32": np.float32, "fp64": np.float64}


def _star(precision: str, reductions: list[Reduction]):  # type: ignore[no-untyped-def]
    u = lambda dy, dx: tap("u", 0, dy, dx)
    return program(2, precision, {"v": 0.25 * (u(0, 1) + u(0, -1) + u(1, 0) + u(-1, 0))},
                   reductions=reductions)


@pytest.mark.parametrize("design", ["plain", "tiled"])
@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_atomic_reductions_match_the_oracle(design: str, precision: str) -> None:
    """sumsq of the change over the computed points, maxabs over all points (the keep faces'
    old values included) and a sum, each accumulated into its scalar by one atomic per block
    (a compare-and-swap loop for maxabs); a second launch adds to the first's result."""
    prog = _star(precision, [
        Reduction("q", "sumsq", tap("v") - tap("u"), accumulate=True),
        Reduction("m", "maxabs", tap("v"), accumulate=True, over="all"),
        Reduction("s", "sum", tap("v"), accumulate=True)])
    shape = (37, 45)  # partial tiles on both axes
    b = Binding((45, 37, 1), {"u": Placement(0), "v": Placement(1)}, {"q": 2, "m": 3, "s": 4})
    dt = DTYPE[precision]
    rng = np.random.default_rng(11)
    arrays = {"u": rng.uniform(-1, 1, shape).astype(dt), "v": rng.uniform(2, 3, shape).astype(dt),
              "q": np.array([0.5], dt), "m": np.array([1.5], dt), "s": np.array([-4.0], dt)}
    before = {"q": 0.5, "m": 1.5, "s": -4.0}
    want = apply(prog, {n: arrays[n] for n in ("u", "v")}, reductions=before)
    k = tiled.generate(prog, b, tx=8, ty=4, py=3, atomic=1) if design == "tiled" else \
        plain.generate(prog, b, bx=16, by=4, atomic=1)
    assert k.knobs["atomic"] == 1 and "kf_done" not in k.source
    assert "__threadfence" not in k.source and "atomicAdd(r_q, kf_v)" in k.source
    got = {n: a.reshape(-1).copy() for n, a in arrays.items()}
    run_standalone(k, got)
    rtol = 1e-5 if precision == "fp32" else 1e-12
    for name in ("q", "m", "s"):
        assert float(got[name][0]) == pytest.approx(want.reductions[name], rel=rtol), name
    np.testing.assert_allclose(got["v"].reshape(shape), want.outputs["v"], rtol=rtol, atol=rtol)
    first = {"u": arrays["u"], "v": got["v"].reshape(shape).copy()}
    mid = {n: float(got[n][0]) for n in before}
    run_standalone(k, got)  # on top of the first launch's scalars
    again = apply(prog, first, reductions=mid)
    for name in ("q", "s"):
        assert float(got[name][0]) == pytest.approx(again.reductions[name], rel=rtol), name


def test_atomic_refusals_and_presets() -> None:
    """Atomics only where they compute the program: a reduction that writes its scalar, an
    fp16 scalar and a program without reductions are refused with the reason, and the
    presets then hold only the last block's way."""
    b = Binding((16, 16, 1), {"u": Placement(0), "v": Placement(1)}, {"q": 2})
    written = _star("fp32", [Reduction("q", "sumsq", tap("v") - tap("u"))])
    half = _star("fp16", [Reduction("q", "sumsq", tap("v") - tap("u"), accumulate=True)])
    none = _star("fp32", [])
    for prog, why in ((written, "write their scalar"), (half, "fp16"), (none, "no reduction")):
        b1 = b if prog.reductions else Binding(b.shape, b.fields)
        with pytest.raises(Refused, match=why):
            plain.generate(prog, b1, atomic=1)
        with pytest.raises(Refused, match=why):
            tiled.generate(prog, b1, atomic=1)
        assert all(not k.get("atomic") for k in tiled.presets(prog) + plain.presets(prog))
    ks, _ = candidates(written, b)
    assert ks and all(k.knobs["atomic"] == 0 for k in ks)
    ks, _ = candidates(none, Binding(b.shape, b.fields))
    assert ks and all("atomic" not in k.knobs for k in ks)  # keys as before


def test_jacobi_candidates_put_coarse_atomic_tiles_first() -> None:
    """The workflow tries 4 candidates: for a Jacobi step with its residual, tiles of 4 and
    8 rows per thread combined by atomics, then the plain design with atomics."""
    r, b = lifted("jacobi_res")
    big = dataclasses.replace(b, shape=(2048, 2048, 1))
    ks, refused = candidates(r.program, big, limit=4)
    assert not refused
    assert [k.key for k in ks] == ["tiled(tx=32,ty=8,py=4,lz=1,atomic=1)",
                                   "tiled(tx=64,ty=4,py=8,lz=1,atomic=1)",
                                   "tiled(tx=32,ty=8,py=2,lz=1,atomic=1)",
                                   "plain(bx=32,by=8,bz=1,atomic=1)"]
    assert ks[0].grid == (64, 64, 1)  # 4096 blocks: 4096 atomics where the original has 16384
    all_ks, _ = candidates(r.program, big)
    assert {k.knobs["atomic"] for k in all_ks} == {0, 1}  # the last block's way stays a choice


def test_index_type_follows_the_grid() -> None:
    r, b = lifted("jacobi_res")
    assert Context(r.program, dataclasses.replace(b, shape=(2048, 2048, 1))).ix == "int"
    assert Context(r.program, dataclasses.replace(b, shape=(46340, 46340, 1))).ix == "long"
    k = plain.generate(r.program, dataclasses.replace(b, shape=(46340, 46340, 1)), atomic=1)
    assert "typedef long kf_i;" in k.source


@pytest.mark.parametrize("atomic", [1, 0])
def test_jacobi_atomic_operators_through_the_adapter(atomic: int) -> None:
    """Lifted from source and by probing, both designs, against the emulated original kernel
    (its per-point atomicAdd of the squared change) on every buffer."""
    r, b = lifted("jacobi_res")
    pr = lift_probe(EmulatedTarget(CASES["jacobi_res"]))
    assert isinstance(pr, Probed), pr
    for prog, bind in ((r.program, b), (pr.program, bind_probed(pr))):
        for k in (plain.generate(prog, bind, bx=8, by=4, atomic=atomic),
                  tiled.generate(prog, bind, tx=8, ty=2, py=3, atomic=atomic)):
            _compare("jacobi_res", k, prog, bind, seed=13)


@pytest.mark.slow
@pytest.mark.skipif(nvcc() is None, reason="no nvcc")
def test_jacobi_operators_compile_lean_for_sm90() -> None:
    """nvcc: every candidate for the 2048x2048 Jacobi step compiles for sm_90; with atomics
    the PTX has one atomic add and no fence; the tiles are loaded without divisions and the
    indices are 32-bit."""
    r, b = lifted("jacobi_res")
    ks, _ = candidates(r.program, dataclasses.replace(b, shape=(2048, 2048, 1)))
    for k in ks:
        assert compile_cubin(standalone(k))[:4] == b"\x7fELF"
        ptx = compile_cubin(standalone(k), ptx=True).decode()
        fences = len(re.findall(r"\b(membar|fence)\.", ptx))
        adds = len(re.findall(r"\b(red|atom)\.global\.add\.f32", ptx))
        if k.knobs["atomic"]:
            assert fences == 0 and adds == 1, k.key
            assert "mul.wide.s32" in ptx and "mul.lo.s64" not in ptx, k.key
        else:
            assert fences >= 1 and adds == 0, k.key
        if k.design == "tiled":
            assert not re.search(r"\b(div|rem)\.", ptx), k.key
