"""Fused operators on the host emulator: T steps in one launch against the float64 oracle
applied T times and against the numpy kernel itself launched T times with IN and OUT swapped
(2D and 3D, every boundary rule, odd T, grids that are no multiple of the tile); the refusals;
the spec entry's ``fuse`` field."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pytest

from kernforge.apps import fused as fz
from kernforge.apps.adapter import Slot
from kernforge.apps.probe import Recognized, recognize
from kernforge.backends.cuda_image import compile_cubin, nvcc
from kernforge.core import ConfigError
from kernforge.stencil import emulate as em
from kernforge.stencil.kernels import overlap
from kernforge.stencil.kernels.common import DoesNotFit

from .stencil_kernels import Kernel, heat_periodic, heat_zeropad, laplace_copy, target

pytestmark = pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")

SLOTS = [Slot(0, 4), Slot(8, 8, True), Slot(16, 8, True)]  # (unsigned n, in, out)
STAR2D = {(0, 0, 0): 0.5, (0, 0, 1): 0.1, (0, 0, -1): 0.15, (0, 1, 0): 0.12, (0, -1, 0): 0.13}
STAR2D_R2 = {**STAR2D, (0, 0, 2): 0.02, (0, 0, -2): 0.03, (0, 2, 0): 0.01, (0, -2, 0): 0.04}
BOX3D = {o: 0.02 + 0.001 * i for i, o in enumerate(itertools.product((-1, 0, 1), repeat=3))}
STAR3D = {(0, 0, 0): 0.25, **{o: 0.125 for o in ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0),
                                                 (0, 0, 1), (0, 0, -1))}}


def _launch(r: Recognized, op: object, steps: int, slots: Sequence[Slot],
            values: dict[int, np.ndarray]) -> None:
    ad = fz.fused_adapter(op, r, slots, slots[-1].offset + slots[-1].size, steps)  # type: ignore[arg-type]
    mod = em.compile_source(ad.source, [ad.entry])
    mod.launch(ad.entry, [values[i] for i in range(len(slots))], ad.grid, ad.block,
               ad.shared_bytes)


def _fused_vs_oracle(r: Recognized, op: object, steps: int) -> None:
    dt = np.dtype(r.dtype)
    rng = np.random.default_rng(steps)
    x = rng.uniform(-1, 1, r.points).astype(dt)
    y = rng.uniform(2, 3, r.points).astype(dt)  # OUT's ring differs from IN's
    want = fz.steps_model(r, x, y, steps)
    x0 = x.copy()
    _launch(r, op, steps, SLOTS, {0: np.array(r.points, np.uint32), 1: x, 2: y})
    assert np.array_equal(x, x0), "the fused kernel wrote into IN"
    rtol, atol = fz.tolerance_steps(r, 3.0, steps)
    np.testing.assert_allclose(y, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("rule", overlap.RULES)
def test_2d_overlapped_tiling_every_rule(rule: str) -> None:
    r = Recognized(1, 2, "float64", (37, 29, 1), "star", 1, 2, STAR2D, rule)
    _fused_vs_oracle(r, overlap.generate(r.cell, rule, 3, ox=16, oy=8, block=(16, 4, 1)), 3)


@pytest.mark.parametrize(("rule", "steps"), [("keep", 5), ("copy", 7), ("periodic", 5)])
def test_2d_radius_2_fp32_planes(rule: str, steps: int) -> None:
    """Three independent z-planes of a radius-2 star, a 21x19 grid in 16x8 tiles."""
    r = Recognized(1, 2, "float32", (21, 19, 3), "star", 2, 2, STAR2D_R2, rule)
    op = overlap.generate(r.cell, rule, steps, ox=16, oy=8, block=(16, 4, 1))
    _fused_vs_oracle(r, op, steps)


@pytest.mark.parametrize("rule", ["keep", "copy", "zeropad"])
def test_3d_box_overlapped_tiling(rule: str) -> None:
    r = Recognized(1, 2, "float64", (13, 11, 10), "box", 1, 3, BOX3D, rule)
    _fused_vs_oracle(r, overlap.generate(r.cell, rule, 3, ox=8, oy=4, oz=4, block=(8, 4, 2)), 3)


def test_3d_star_1_copy_reuses_the_temporal_design() -> None:
    r = Recognized(1, 2, "float32", (21, 19, 12), "star", 1, 3, STAR3D, "copy")
    designs = {op.design for _, op in fz.candidates(r, (3,))}
    assert designs == {"temporal", "overlap"}
    for tile in ({"tx": 16, "ty": 16, "lz": 4},  # small tiles: several blocks
                 {"tx": 16, "ty": 16, "lz": 4, "pipe": 1, "fi": 1, "cy": 2}):
        op = fz._temporal(r, 5, tile)
        assert op is not None and op.params["steps"] == 5
        _fused_vs_oracle(r, op, 5)
    keep = Recognized(1, 2, "float32", (21, 19, 12), "star", 1, 3, STAR3D, "keep")
    assert {op.design for _, op in fz.candidates(keep, (3,))} == {"overlap"}  # ring alternates


@pytest.mark.parametrize("case", ["heat_zeropad", "heat_periodic", "laplace_copy"])
def test_fused_equals_the_original_launched_t_times_swapped(case: str) -> None:
    """What the GPU verification does, with the numpy kernel as the original: recognized,
    then T launches of it with IN and OUT swapped against one fused launch."""
    kernel: Kernel
    if case == "heat_zeropad":
        n, steps = 24, 3
        kernel = heat_zeropad(n, 0.1)
        t = target(kernel, {1: ("float64", n * n), 2: ("float64", n * n)}, (n,), "float64")
        slots, scalars = SLOTS, {0: np.array(n, np.uint32)}
    elif case == "heat_periodic":
        lx, ly, steps = 32, 16, 5
        kernel = heat_periodic(lx, ly)
        t = target(kernel, {0: ("float32", lx * ly), 1: ("float32", lx * ly)}, (lx, ly),
                   "float32")
        slots = [Slot(0, 8, True), Slot(8, 8, True), Slot(16, 4), Slot(20, 4), Slot(24, 4),
                 Slot(28, 4)]
        scalars = {2: np.array(0.0096, np.float32), 3: np.array(0.96, np.float32),
                   4: np.array(lx, np.int32), 5: np.array(ly, np.int32)}
    else:
        nx, ny, nz, steps = 14, 11, 9, 3
        kernel = laplace_copy(nx, ny, nz)
        n = nx * ny * nz
        t = target(kernel, {4: ("float32", n), 5: ("float32", n)}, (nx, ny, nz, nx), "float32")
        slots = [Slot(0, 4), Slot(4, 4), Slot(8, 4), Slot(12, 4), Slot(16, 8, True),
                 Slot(24, 8, True)]
        scalars = {i: np.array(v, np.int32) for i, v in enumerate((nx, ny, nz, nx))}
    r = recognize(t)
    assert isinstance(r, Recognized), r
    dt = np.dtype(r.dtype)
    rng = np.random.default_rng(5)
    x, y = rng.uniform(-1, 1, r.points).astype(dt), rng.uniform(2, 3, r.points).astype(dt)
    src, dst = x.copy(), y.copy()
    for _ in range(steps):  # the time loop: launch, then swap the two pointers
        kernel({r.in_param: src, r.out_param: dst})
        src, dst = dst, src
    for _, op in fz.candidates(r, (steps,))[:2]:
        xi, yo = x.copy(), y.copy()
        _launch(r, op, steps, slots, {**scalars, r.in_param: xi, r.out_param: yo})
        assert np.array_equal(xi, x)
        rtol, atol = fz.tolerance_steps(r, 3.0, steps)
        np.testing.assert_allclose(yo, src, rtol=rtol, atol=atol, err_msg=op.key)


def test_refusals() -> None:
    r = Recognized(1, 2, "float32", (64, 64, 1), "star", 1, 2, STAR2D, "keep")
    op = overlap.generate(r.cell, "keep", 3)
    for even in (2, 4, 64, 1, 65):
        with pytest.raises(ConfigError, match="odd number"):
            fz.check_steps(even)
    with pytest.raises(ConfigError, match="odd number"):
        fz.candidates(r, (4,))
    with pytest.raises(ConfigError, match="odd number"):
        fz.fused_adapter(op, r, SLOTS, 24, 4)
    with pytest.raises(ConfigError, match="fuses 3 steps, not 5"):
        fz.fused_adapter(op, r, SLOTS, 24, 5)
    odd = Recognized(1, 2, "float32", (64, 64, 1), "star", 1, 2, STAR2D, "reflect")
    assert "boundary rule 'reflect'" in (fz.refusal(odd) or "")
    with pytest.raises(ConfigError, match="not fusable"):
        fz.candidates(odd)
    inplace = Recognized(1, 1, "float32", (64, 64, 1), "star", 1, 2, STAR2D, "keep")
    assert "in place" in (fz.refusal(inplace) or "")
    assert "differ in size" in (fz.refusal(r, 4 * 4096, 4 * 4097) or "")
    assert fz.refusal(r, 4 * 4096, 4 * 4096) is None
    with pytest.raises(DoesNotFit, match="shared memory"):
        overlap.generate(r.cell, "keep", 21, ox=128, oy=64)
    with pytest.raises(DoesNotFit, match="boundary rule"):
        overlap.generate(r.cell, "reflect", 3)


def test_the_fuse_field_names_the_swapped_pointers() -> None:
    r = Recognized(6, 7, "float64", (64, 64, 1), "star", 1, 2, STAR2D, "zeropad")
    slots = [Slot(0, 4), *(Slot(8 * i, 8) for i in range(1, 6)), Slot(48, 8, True),
             Slot(56, 8, True)]
    assert fz.fuse_field(slots, r, 5) == {"steps": 5, "in_offset": 48, "out_offset": 56}
    with pytest.raises(ConfigError, match="no device pointer"):
        fz.fuse_field(slots[:7], r, 5)
    with pytest.raises(ConfigError, match="odd number"):
        fz.fuse_field(slots, r, 6)


def test_candidates_try_each_t_and_fit_static_shared_memory() -> None:
    r = Recognized(1, 2, "float64", (4096, 4096, 1), "star", 1, 2, STAR2D, "periodic")
    got = fz.candidates(r)
    assert sorted({s for s, _ in got}) == [3, 5, 7]
    assert all(overlap.shared_bytes(r.cell, s, op.params["ox"], op.params["oy"], 1)
               <= overlap.MAX_SHARED for s, op in got)


@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
def test_fused_adapters_compile_for_sm90() -> None:
    r = Recognized(1, 2, "float32", (4096, 4096, 1), "star", 1, 2, STAR2D, "keep")
    r3 = Recognized(1, 2, "float32", (256, 256, 256), "star", 1, 3, STAR3D, "copy")
    for m in (r, r3):
        s, op = fz.candidates(m, (5,))[0]
        ad = fz.fused_adapter(op, m, SLOTS, 24, s)
        assert compile_cubin(ad.source).startswith(b"\x7fELF"), op.key
