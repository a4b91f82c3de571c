"""Fused operators that fold a step's boundary kernels, on the host emulator: the demo
application's step (examples/heat3d_cupy.py's own CUDA source: heat_stencil, then
apply_boundary for axis 0, 1, 2) recognized and lifted by probing, fused for T = 3, 5, 7, and
compared with T emulated unfused steps from fresh random inputs and from the program's own
state; a 2D loop with faces held at constants; the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.apps import fused as fz
from kernforge.apps import lift_companion as lc
from kernforge.apps.adapter import Slot
from kernforge.apps.probe import Recognized, recognize
from kernforge.backends.cuda_image import compile_cubin, nvcc
from kernforge.stencil import emulate as em
from kernforge.stencil import faces as fc
from kernforge.stencil.kernels import overlap
from kernforge.stencil.kernels.common import DoesNotFit

from .demo_step import DEMO_SLOTS, DemoStep, boundary_target, run_fused, stencil_target

pytestmark = pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")

STAR2D = {(0, 0, 0): 0.5, (0, 0, 1): 0.1, (0, 0, -1): 0.15, (0, 1, 0): 0.12, (0, -1, 0): 0.13}


@pytest.fixture(scope="module")
def demo() -> tuple[DemoStep, Recognized, fc.Groups]:
    step = DemoStep(13)
    r = recognize(stencil_target(step))
    assert isinstance(r, Recognized), r
    assert (r.dims, r.kind, r.radius, r.boundary) == (3, "star", 1, "copy")
    got = []
    for axis in range(3):
        rules = lc.lift(boundary_target(step, axis), 0, (), r.shape, r.dtype)
        assert not isinstance(rules, lc.Refused), rules
        got.append(rules)
    return step, r, tuple(got)


def test_the_demo_boundary_kernels_lift_to_its_face_rules(demo: tuple) -> None:
    _, _, groups = demo
    assert groups == ((fc.Face(0, 0, 0, 1.0), fc.Face(0, 1, 1)),
                      (fc.Face(1, 0, 1), fc.Face(1, 1, 1)),
                      (fc.Face(2, 0, 1), fc.Face(2, 1, 1)))
    assert fc.describe(groups) == ("[z=0 := 1.0, z=n-1 := z-1]; [y=0 := y+1, y=n-1 := y-1]; "
                                   "[x=0 := x+1, x=n-1 := x-1]")


def _check(r: Recognized, groups: fc.Groups, got: np.ndarray, want: np.ndarray, steps: int,
           scale: float) -> None:
    n = r.shape[0]
    g = got.reshape(n, n, n)
    assert np.array_equal(fc.apply(g, groups), g), "a copied face is not an exact copy"
    hot = want.reshape(n, n, n)[0, 1:-1, 1:-1]  # z=0 held at 1 (its edges: the y, x rules)
    assert np.all(hot == np.float32(1.0)) and np.array_equal(g[0, 1:-1, 1:-1], hot)
    rtol, atol = fz.tolerance_steps(r, scale, steps)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("steps", [3, *(pytest.param(t, marks=pytest.mark.slow) for t in (5, 7))])
def test_fused_demo_steps_equal_t_unfused_steps(demo: tuple, steps: int) -> None:
    """From fresh random inputs (OUT preset unlike IN) and from the program's own state (its
    initial field after 4 steps): one fused launch against T emulated steps of the example's
    kernels; 4-point tiles on 13 points: the last block along each axis moves back."""
    step, r, groups = demo
    op = overlap.generate(r.cell, r.boundary, steps, ox=4, oy=4, oz=4, block=(8, 4, 2),
                          faces=groups)
    rng = np.random.default_rng(steps)
    x = rng.uniform(-1, 1, step.points).astype(np.float32)
    y = rng.uniform(2, 3, step.points).astype(np.float32)
    want, _ = step.run(x, y, steps)
    got = run_fused(r, op, steps, x, y)
    _check(r, groups, got, want, steps, 3.0)
    assert np.array_equal(run_fused(r, op, steps, x, y, shuffle=steps), got)  # any block order
    n = step.n
    u = np.zeros((n, n, n), np.float32)
    u[n // 4:n // 2, n // 4:n // 2, n // 4:n // 2] = 1
    a, b = step.run(u.reshape(-1), np.zeros(step.points, np.float32), 4)
    want, _ = step.run(a, b, steps)
    _check(r, groups, run_fused(r, op, steps, a, b), want, steps, 1.0)
    model = fz.steps_model(r, a, b, steps, groups)
    np.testing.assert_allclose(model, want, atol=1e-6)


@pytest.mark.parametrize("design", ["temporal", "overlap"])
def test_the_candidates_fold_the_faces_into_both_designs(demo: tuple, design: str) -> None:
    step, r, groups = demo
    got = fz.candidates(r, (3,), faces=groups)
    assert {op.design for _, op in got} == {"temporal", "overlap"}
    assert all(op.params["faces"] == fc.describe(groups) for _, op in got)
    steps, op = next((s, op) for s, op in got if op.design == design)
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, step.points).astype(np.float32)
    y = rng.uniform(2, 3, step.points).astype(np.float32)
    want, _ = step.run(x, y, steps)
    _check(r, groups, run_fused(r, op, steps, x, y), want, steps, 3.0)


@pytest.mark.parametrize(("rule", "steps"), [("keep", 5), ("zero", 3), ("copy", 7)])
def test_2d_faces_held_and_copied_on_every_base_rule(rule: str, steps: int) -> None:
    """A 2D loop (two independent planes) whose boundary kernel holds y=0 at 0.75 and copies
    x=n-1 from 2 points inward: overlap against the float64 oracle of the step."""
    r = Recognized(1, 2, "float64", (23, 17, 2), "star", 1, 2, STAR2D, rule)
    groups = ((fc.Face(1, 0, 0, 0.75),), (fc.Face(2, 1, 2),))
    op = overlap.generate(r.cell, rule, steps, ox=8, oy=4, block=(8, 4, 1), faces=groups)
    slots = [Slot(0, 4), Slot(8, 8, True), Slot(16, 8, True)]
    ad = fz.fused_adapter(op, r, slots, 24, steps)
    mod = em.compile_source(ad.source, [ad.entry])
    rng = np.random.default_rng(steps)
    x, y = rng.uniform(-1, 1, r.points), rng.uniform(2, 3, r.points)
    want = fz.steps_model(r, x, y, steps, groups)
    xi, yo = x.copy(), y.copy()
    mod.launch(ad.entry, [np.array(r.points, np.uint32), xi, yo], ad.grid, ad.block,
               ad.shared_bytes)
    assert np.array_equal(xi, x)
    g = yo.reshape(2, 17, 23)
    assert np.all(g[:, 0, :-1] == 0.75) and np.array_equal(g[:, :, -1], g[:, :, -3])
    rtol, atol = fz.tolerance_steps(r, 3.0, steps)
    np.testing.assert_allclose(yo, want, rtol=rtol, atol=atol)


def test_faces_that_do_not_fold_are_refused() -> None:
    r = Recognized(1, 2, "float32", (64, 64, 1), "star", 1, 2, STAR2D, "periodic")
    copy = ((fc.Face(2, 0, 1),),)
    assert "fold into rules" in (fz.refusal(r, faces=copy) or "")
    with pytest.raises(DoesNotFit, match="fold into boundary rules"):
        overlap.generate(r.cell, "periodic", 3, faces=copy)
    c = Recognized(1, 2, "float32", (64, 64, 1), "star", 1, 2, STAR2D, "copy")
    assert fz.refusal(c, faces=copy) is None
    assert "does not reach" in (fz.refusal(c, faces=((fc.Face(0, 0, 0, 1.0),),)) or "")
    assert "not finite" in (fz.refusal(c, faces=((fc.Face(1, 0, 0, np.inf),),)) or "")
    with pytest.raises(DoesNotFit, match="more than 9 points along x"):
        overlap.generate(c.cell, "copy", 3, ox=8, oy=4, block=(8, 4, 1),
                         faces=((fc.Face(2, 1, 9),),))
    assert fz.refusal(c, faces=((fc.Face(2, 1, 32),),)) is not None  # past the middle


@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
def test_a_fused_demo_adapter_compiles_for_sm90() -> None:
    r = Recognized(0, 1, "float32", (256, 256, 256), "star", 1, 3,
                   {(0, 0, 0): 0.4, **{o: 0.1 for o in ((1, 0, 0), (-1, 0, 0), (0, 1, 0),
                                                       (0, -1, 0), (0, 0, 1), (0, 0, -1))}},
                   "copy")
    groups = ((fc.Face(0, 0, 0, 1.0), fc.Face(0, 1, 1)), (fc.Face(1, 0, 1), fc.Face(1, 1, 1)),
              (fc.Face(2, 0, 1), fc.Face(2, 1, 1)))
    s, op = fz.candidates(r, (3,), faces=groups)[0]
    ad = fz.fused_adapter(op, r, DEMO_SLOTS, 24, s)
    assert compile_cubin(ad.source).startswith(b"\x7fELF"), op.key
