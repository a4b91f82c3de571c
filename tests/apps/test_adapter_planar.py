"""The 2D candidates (the y-marching design's presets) in the adapter, on the host emulator:
every boundary rule the probe recognizes, star and box of radius 1 and 2, fp32 and fp64, grids
whose rows and interiors are not multiples of the blocks, vectors or chunks, a misaligned grid;
the candidates' order; nvcc for sm_90."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kernforge.apps.adapter import PLANAR_LIMIT, Slot, adapter, candidates
from kernforge.apps.probe import BOUNDARY_RULES, Recognized, model, recognize
from kernforge.backends.cuda_image import compile_cubin, nvcc
from kernforge.stencil import emulate as em
from kernforge.stencil.spec import custom

from .stencil_kernels import heat_zeropad, target

SLOTS = [Slot(0, 4), Slot(8, 8, True), Slot(16, 8, True)]  # (int n, T* in, T* out)


def recognized(kind: str, radius: int, dtype: str, nx: int, ny: int, boundary: str,
               seed: int = 0) -> Recognized:
    offsets = custom(kind, radius, {}, dims=2).offsets
    w = np.random.default_rng(seed).uniform(0.05, 0.3, len(offsets))
    return Recognized(1, 2, dtype, (nx, ny, 1), kind, radius, 2,
                      {o: float(v) for o, v in zip(offsets, w, strict=True)}, boundary)


def aligned(n: int, dt: np.dtype) -> np.ndarray:
    """``n`` zeros of ``dt`` starting on a 64-byte boundary (as a device allocation does), so
    that with no shift the adapter runs the operator, not its per-point path."""
    raw = np.zeros(n * dt.itemsize + 64, dtype=np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + n * dt.itemsize].view(dt)


def run_adapter(r: Recognized, op: Any, shift: int = 0) -> None:
    """The adapter around ``op`` on the emulator equals the recognized kernel's model
    (``shift``: both grids start that many elements into their buffers)."""
    ad = adapter(op, r, SLOTS, 24)
    dt = np.dtype(r.dtype)
    rng = np.random.default_rng(5)
    x, y = aligned(r.points + shift, dt), aligned(r.points + shift, dt)
    x[shift:] = rng.uniform(-1, 1, r.points)
    y[shift:] = rng.uniform(2, 3, r.points)
    want = model(r, x[shift:], y[shift:]).reshape(-1)
    mod = em.compile_source(ad.source, [ad.entry])
    mod.launch(ad.entry, [np.array(r.shape[0], np.uint32), x[shift:], y[shift:]], ad.grid,
               ad.block, ad.shared_bytes)
    tol = 1e-12 if dt == np.float64 else 4e-6
    np.testing.assert_allclose(y[shift:].astype(np.float64), want, atol=tol, rtol=0,
                               err_msg=f"{op.key} {r.describe()}")


CASES = [  # (kind, radius, dtype, nx, ny, boundary)
    ("star", 1, "float64", 40, 23, "zeropad"),  # heat-cuda's solve
    ("star", 1, "float32", 36, 19, "periodic"),  # heat2d's dev_lapl_iter
    ("star", 1, "float64", 42, 27, "keep"),
    ("star", 2, "float32", 44, 21, "copy"),
    ("box", 1, "float64", 38, 17, "zero"),
    ("box", 2, "float64", 34, 22, "zeropad"),
    ("box", 1, "float32", 37, 26, "periodic"),  # an odd row: only the scalar preset builds
    ("box", 2, "float32", 40, 18, "keep"),
]


@pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")
@pytest.mark.parametrize(("kind", "radius", "dtype", "nx", "ny", "boundary"), CASES,
                         ids=[f"{c[0]}{c[1]}-{c[2]}-{c[3]}x{c[4]}-{c[5]}" for c in CASES])
def test_every_planar_candidate_matches_the_kernel(kind: str, radius: int, dtype: str, nx: int,
                                                   ny: int, boundary: str) -> None:
    r = recognized(kind, radius, dtype, nx, ny, boundary, seed=nx)
    ops = candidates(r)
    assert ops[-1].design == "naive" and len(ops) <= PLANAR_LIMIT
    ym = [o for o in ops if o.design == "ymarch"]
    assert ym and ops[0].design == "ymarch"
    for op in ym:
        run_adapter(r, op)


def test_the_rules_are_the_probes() -> None:
    assert {c[5] for c in CASES} == set(BOUNDARY_RULES)


@pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")
@pytest.mark.parametrize("shift", [1, 2])
def test_a_misaligned_grid_takes_the_per_point_path(shift: int) -> None:
    r = recognized("star", 1, "float32", 40, 20, "copy")
    op = candidates(r)[0]
    assert op.design == "ymarch" and op.params["vx"] == 4
    run_adapter(r, op, shift=shift)


def test_heat_cuda_gets_the_y_marching_presets_first() -> None:
    """At heat-cuda's size: 16-byte lanes with the chunk from the grid first, naive last."""
    n = 24
    r = recognize(target(heat_zeropad(n, 0.1), {1: ("float64", n * n), 2: ("float64", n * n)},
                         (n,), "float64"))
    assert isinstance(r, Recognized) and r.dims == 2 and r.boundary == "zeropad"
    import dataclasses

    big = dataclasses.replace(r, shape=(4096, 4096, 1))
    keys = [o.key for o in candidates(big)]
    assert keys == ["ymarch[ly=16,pf=2,tx=64,ty=2,vx=2]", "ymarch[ly=32,pf=2,tx=64,ty=2,vx=2]",
                    "ymarch[ly=16,pf=4,tx=64,ty=2,vx=2]", "ymarch[ly=32,pf=2,tx=128,ty=1,vx=1]",
                    "naive[block=(32, 8, 1)]"]
    assert [o.key for o in candidates(big, limit=2)] == [keys[0], keys[-1]]


# nvcc builds; what the adapters compute: test_every_planar_candidate_matches_the_kernel
@pytest.mark.slow
@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
@pytest.mark.parametrize(("kind", "radius", "dtype", "boundary"), [
    ("star", 1, "float64", "zeropad"), ("star", 1, "float32", "periodic"),
    ("box", 2, "float64", "copy")])
def test_planar_adapters_compile_for_sm90(kind: str, radius: int, dtype: str,
                                          boundary: str) -> None:
    r = recognized(kind, radius, dtype, 4096, 4096, boundary)
    for op in candidates(r):
        assert compile_cubin(adapter(op, r, SLOTS, 24).source).startswith(b"\x7fELF")
