"""Operators generated for lifted programs, on the host emulator: both designs for every class
of lift_kernels.py against the float64 oracle, and through the adapter (the recorded kernel's
parameter layout) against the emulated original kernel; lifted from source and by probing;
the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.apps.adapter import Slot
from kernforge.apps.lift_probe import Probed, lift_probe
from kernforge.apps.program_adapter import program_adapter
from kernforge.apps.program_binding import bind_probed, extent
from kernforge.backends.cuda_image import compile_cubin, nvcc
from kernforge.core import ConfigError
from kernforge.stencil import emulate as em
from kernforge.stencil.program import Reduction, apply, boundary, error_bound, program, tap
from kernforge.stencil.program import codegen_plain as plain
from kernforge.stencil.program import codegen_tiled as tiled
from kernforge.stencil.program.binding import Binding, Placement
from kernforge.stencil.program.codegen import Kernel, Refused
from kernforge.stencil.program.designs import candidates

from .lift_kernels import CASES, CONSTANTS, EmulatedTarget, scalars
from .program_ops_helpers import (
    contents,
    lifted,
    run_adapter,
    run_original,
    run_standalone,
    slots,
)

pytestmark = pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")

# small tiles: several blocks per axis, a ring of planes that turns over, rows per thread
SMALL = {"plain": {"bx": 8, "by": 4, "bz": 2}, "tiled": {"tx": 8, "ty": 2, "py": 2, "lz": 3}}
ONE_D = ("inplace", "advect", "table1d", "gray", "copy2")
CDTYPE = {"float": np.float32, "double": np.float64}


def _kernels(entry: str, p: object, b: Binding) -> list[Kernel]:
    out = [plain.generate(p, b, **SMALL["plain"])]  # type: ignore[arg-type]
    if entry not in ONE_D:
        out.append(tiled.generate(p, b, **SMALL["tiled"]))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("entry", sorted(CASES))
def test_designs_match_the_oracle(entry: str) -> None:
    case = CASES[entry]
    r, b = lifted(entry)
    p = r.program
    bufs = contents(case, 3)
    n = int(np.prod(case.shape))
    fields = {name: bufs[pl.param][pl.offset:pl.offset + n].astype(np.float64)
              .reshape(case.shape) for name, pl in b.fields.items()}
    before = {name: float(bufs[i][0]) for name, i in b.reductions.items()}
    consts = {**CONSTANTS, **{name: list(bufs[i].astype(np.float64))
                              for name, i in b.tables.items()}}
    want = apply(p, fields, params=scalars(case), constants=consts, reductions=before)
    bound = error_bound(p, fields, params=scalars(case), constants=consts)
    for k in _kernels(entry, p, b):
        arrays: dict[str, np.ndarray] = {}
        for name, pl in b.fields.items():
            arrays[name] = bufs[pl.param][pl.offset:pl.offset + n].copy()
        for name, i in b.reductions.items():
            arrays[name] = bufs[i].copy()
        for i in p.params():
            arrays[str(i)] = np.array(scalars(case)[i], dtype=CDTYPE[b.scalars[i]])
        for name, i in b.tables.items():
            arrays[name] = bufs[i].copy()
        run_standalone(k, arrays)
        for name, value in want.outputs.items():
            have = arrays[name].astype(np.float64).reshape(case.shape)
            err = np.abs(have - value)
            assert np.all(err <= 2 * bound[name] + 1e-300), (k.key, name, err.max())
        for name, value in want.reductions.items():
            assert float(arrays[name][0]) == pytest.approx(value, rel=1e-5, abs=1e-6), k.key


def _compare(entry: str, k: Kernel, p: object, b: Binding, seed: int) -> None:
    """The adapter against the emulated original kernel, every buffer."""
    case = CASES[entry]
    bufs = contents(case, seed)
    want = run_original(case, bufs)
    got = run_adapter(case, k, p, b, bufs)  # type: ignore[arg-type]
    written = {b.fields[n].param for n in p.names("out", "inout")}  # type: ignore[attr-defined]
    for i, ref in want.items():
        if i in written or i in b.reductions.values():
            rtol = 1e-2 if ref.dtype == np.float16 else 1e-4 if ref.dtype == np.float32 else 1e-11
            np.testing.assert_allclose(got[i].astype(np.float64), ref.astype(np.float64),
                                       rtol=rtol, atol=rtol, err_msg=f"{k.key} param {i}")
        else:
            np.testing.assert_array_equal(got[i], ref, err_msg=f"{k.key} wrote param {i}")


@pytest.mark.parametrize("entry", sorted(CASES))
def test_adapter_matches_the_original_kernel(entry: str) -> None:
    r, b = lifted(entry)
    for k in _kernels(entry, r.program, b):
        _compare(entry, k, r.program, b, seed=5)


@pytest.mark.parametrize("entry", ["jacobi_res", "sig3", "pair2d", "hot2d"])
def test_probed_programs_through_the_adapter(entry: str) -> None:
    """Lifted by probing (numbers for every coefficient, fields at measured starts)."""
    pr = lift_probe(EmulatedTarget(CASES[entry]))
    assert isinstance(pr, Probed), pr
    b = bind_probed(pr)
    for k in _kernels(entry, pr.program, b):
        _compare(entry, k, pr.program, b, seed=9)


def test_candidates_put_tiles_first_and_keep_plain() -> None:
    r, b = lifted("coef3d")
    ks, refused = candidates(r.program, b, limit=3)
    assert [k.design for k in ks] == ["tiled", "tiled", "plain"] and not refused
    r1, b1 = lifted("advect")
    ks, refused = candidates(r1.program, b1)
    assert {k.design for k in ks} == {"plain"} and "1D" in refused["tiled"]


def test_refusals() -> None:
    r, b = lifted("coef3d")
    with pytest.raises(Refused, match="shared memory"):
        tiled.generate(r.program, b, tx=32, ty=32, py=8, lz=4)
    with pytest.raises(Refused, match="1 to 1024"):
        plain.generate(r.program, b, bx=64, by=8, bz=4)
    pointwise = program(2, "fp32", {"o": 2.0 * tap("u")})
    with pytest.raises(Refused, match="nothing to stage"):
        tiled.generate(pointwise, Binding((8, 8, 1), {"u": Placement(0), "o": Placement(1)}))
    # a written grid overlapping a read one: new values would be read
    with pytest.raises(ConfigError, match="overlaps"):
        plain.generate(r.program, Binding(b.shape, {**b.fields, "un": Placement(0, 5)},
                                          scalars=b.scalars))
    with pytest.raises(ConfigError, match="no value for __constant__"):
        w, bw = lifted("wave")
        plain.generate(w.program, Binding(bw.shape, bw.fields))
    sl, total = slots(CASES["coef3d"])
    k = plain.generate(r.program, b)
    bad = [*sl[:3], Slot(sl[3].offset, 4), *sl[4:]]
    with pytest.raises(ConfigError, match="read as a double"):
        program_adapter(k, r.program, b, bad, total)


def test_extents() -> None:
    assert extent("n*n", {"n": 5}) == 25 and extent("nx - 2", {"nx": 9}) == 7
    with pytest.raises(ConfigError):
        extent("n**2", {"n": 3})


@pytest.mark.skipif(nvcc() is None, reason="no nvcc")
@pytest.mark.parametrize("entry", [pytest.param(e, marks=pytest.mark.slow) for e in
                                   ("jacobi_res", "coef3d", "half2d", "hot2d", "sig3", "table1d",
                                    "advect")])
def test_adapters_compile_with_nvcc(entry: str) -> None:
    """nvcc is stricter than the host emulator: every design's adapter compiles for sm_90."""
    r, b = lifted(entry)
    sl, total = slots(CASES[entry])
    ks, _ = candidates(r.program, b)
    for k in ks:
        assert compile_cubin(program_adapter(k, r.program, b, sl, total).source)[:4] == \
            b"\x7fELF"


@pytest.mark.parametrize("faces", [{"z-": "periodic", "z+": "periodic", "x-": "clamp"},
                                   {"z-": "zeropad", "y+": "copy", "x+": "zero"}])
@pytest.mark.parametrize("design", ["plain", "tiled"])
def test_3d_box_terms_and_mixed_faces(design: str, faces: dict[str, str]) -> None:
    """Taps off the column in other planes (the tiled design's ring of planes), a product of
    fields, a coefficient field and an in-out field, against the oracle."""
    u = lambda dz, dy, dx: tap("u", dz, dy, dx)
    e = (0.3 * u(0, 0, 0) + 0.1 * (u(1, 1, 0) + u(-1, 0, 1) + u(0, -1, -1) + u(2, 0, 0))
         + tap("k") * u(-1, -1, 0) * u(0, 1, 1) - 0.5 * tap("w"))
    prog = program(3, "fp64", {"w": e}, roles={"k": "coef"}, copy_from={"w": "u"},
                   faces=boundary("keep", faces))
    shape = (11, 9, 10)
    b = Binding((shape[2], shape[1], shape[0]), {"u": Placement(0), "k": Placement(1),
                                                 "w": Placement(2)})
    rng = np.random.default_rng(1)
    arrays = {n: rng.uniform(-1, 1, shape) for n in ("u", "k", "w")}
    want = apply(prog, arrays)
    k = tiled.generate(prog, b, tx=4, ty=2, py=2, lz=4) if design == "tiled" else \
        plain.generate(prog, b, bx=4, by=4, bz=2)
    got = {n: a.reshape(-1).copy() for n, a in arrays.items()}
    run_standalone(k, got)
    np.testing.assert_allclose(got["w"].reshape(shape), want.outputs["w"], rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("design", ["plain", "tiled"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_every_reduction_form(design: str, precision: str) -> None:
    """sum written over the computed points, maxabs accumulated over all points (keep faces'
    old values included), sumsq of a change: the last block's result against the oracle."""
    u = lambda dy, dx: tap("u", 0, dy, dx)
    prog = program(2, precision, {"v": 0.25 * (u(0, 1) + u(0, -1) + u(1, 0) + u(-1, 0))},
                   reductions=[Reduction("s", "sum", tap("v") - tap("u")),
                               Reduction("m", "maxabs", tap("v"), accumulate=True, over="all"),
                               Reduction("q", "sumsq", tap("v"), accumulate=True)])
    shape = (19, 23)
    b = Binding((23, 19, 1), {"u": Placement(0), "v": Placement(1)},
                {"s": 2, "m": 3, "q": 4})
    dt = np.float16 if precision == "fp16" else np.float32
    rng = np.random.default_rng(4)
    arrays = {"u": rng.uniform(-1, 1, shape).astype(dt), "v": rng.uniform(2, 3, shape).astype(dt),
              "s": np.array([5.0], dt), "m": np.array([2.5], dt), "q": np.array([1.0], dt)}
    want = apply(prog, {n: arrays[n] for n in ("u", "v")},
                 reductions={"m": 2.5, "q": 1.0})
    k = tiled.generate(prog, b, tx=8, ty=2, py=2) if design == "tiled" else \
        plain.generate(prog, b, bx=8, by=4)
    got = {n: a.reshape(-1).copy() for n, a in arrays.items()}
    run_standalone(k, got)
    rtol = 2e-3 if precision == "fp16" else 1e-5
    for name in ("s", "m", "q"):
        assert float(got[name][0]) == pytest.approx(want.reductions[name], rel=rtol, abs=rtol)
    run_standalone(k, got)  # the module's counter was reset: a second launch works too
    assert float(got["q"][0]) > want.reductions["q"]


@pytest.mark.parametrize("block", [(4, 3), (16, 3), (32, 8)])
def test_reductions_over_many_blocks_and_partial_warps(block: tuple[int, int]) -> None:
    """The block's shuffles with a partial last warp (12 and 48 threads), and the last block
    reading more partials than 8 per thread (224 blocks of 12 threads), against the oracle."""
    u = lambda dy, dx: tap("u", 0, dy, dx)
    prog = program(2, "fp32", {"v": 0.25 * (u(0, 1) + u(0, -1) + u(1, 0) + u(-1, 0))},
                   reductions=[Reduction("q", "sumsq", tap("v") - tap("u"), accumulate=True),
                               Reduction("m", "maxabs", tap("v") - tap("u"))])
    shape = (40, 64)
    b = Binding((64, 40, 1), {"u": Placement(0), "v": Placement(1)}, {"q": 2, "m": 3})
    rng = np.random.default_rng(8)
    arrays = {"u": rng.uniform(-1, 1, shape).astype(np.float32),
              "v": rng.uniform(2, 3, shape).astype(np.float32),
              "q": np.array([0.5], np.float32), "m": np.array([9.0], np.float32)}
    want = apply(prog, {n: arrays[n] for n in ("u", "v")}, reductions={"q": 0.5})
    k = plain.generate(prog, b, bx=block[0], by=block[1])
    got = {n: a.reshape(-1).copy() for n, a in arrays.items()}
    run_standalone(k, got)
    for name in ("q", "m"):
        assert float(got[name][0]) == pytest.approx(want.reductions[name], rel=1e-6), name
    assert "__shfl_down_sync" in k.source and "kf_red[32]" in k.source
