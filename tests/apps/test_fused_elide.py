"""Fused steps whose companions include a per-step diagnostic, on the host emulator
(apps/elide_companion.py, apps/fused_elided.py): the demo application's whole default step
(examples/heat3d_cupy.py's own CUDA source: heat_stencil, apply_boundary for axis 0, 1, 2, then
its two-pass reduction sq_diff_partial and sum_partials into third buffers) is classified by
probing, the boundary kernels folded and the reduction elided; T fused steps followed by one
original step equal T+1 unfused steps on every buffer (grids, partial sums, the result) for
T = 3, 5; and the refusals: a reduction that accumulates across steps, one that writes OUT, one
whose output the stencil reads, one that reads what a later companion of the step writes."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pytest

from kernforge.apps import elide_companion as ec
from kernforge.apps import fused as fz
from kernforge.apps import lift_companion as lc
from kernforge.apps.adapter import Slot
from kernforge.apps.fused_elided import diag_tolerance
from kernforge.apps.probe import Recognized, recognize
from kernforge.stencil import emulate as em
from kernforge.stencil import faces as fc
from kernforge.stencil.kernels import overlap

from .demo_step import SLACK, DemoStep, module, stencil_target
from .stencil_kernels import NumpyTarget

pytestmark = pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")

BLOCK, GRID = 32, 6  # the reduction's block and grid (the example: 256, 1024)
DIAG = f"""
extern "C" __global__ void diag_sq(const real_t* a, const real_t* b, double* partial,
                                   long long n)
{{ sq_diff_partial<real_t, {BLOCK}>(a, b, partial, n); }}
extern "C" __global__ void diag_sum(const double* partial, double* out, int m)
{{ sum_partials<double, {BLOCK}>(partial, out, m); }}
extern "C" __global__ void diag_acc(const double* partial, double* out, int m)
{{
    const double before = out[0];
    __syncthreads();
    sum_partials<double, {BLOCK}>(partial, out, m);
    __syncthreads();
    if (threadIdx.x == 0) out[0] += before;
}}
extern "C" __global__ void diag_into_out(const real_t* a, real_t* b, double* partial,
                                         long long n)
{{
    sq_diff_partial<real_t, {BLOCK}>(a, b, partial, n);
    if (blockIdx.x == 0 && threadIdx.x == 0) b[0] = 0;
}}
"""
IN, OUT, PART, RES, COEF = 0x1000, 0x2000, 0x3000, 0x4000, 0x5000  # recorded pointers
REGION = {IN: 0, OUT: 1, PART: 2, RES: 3, COEF: 4}
DEMO_SLOTS = [Slot(0, 8, True), Slot(8, 8, True), Slot(16, 4), Slot(20, 4)]  # u, un, alpha, n


class Step(DemoStep):
    """The demo's step with its diagnostic: heat_stencil, apply_boundary x3, diag_sq, diag_sum
    (``acc``: diag_acc, which adds to the result instead)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.mod = module(self.dtype, DIAG)

    def diag(self, a: np.ndarray, b: np.ndarray, partial: np.ndarray, out: np.ndarray,
             acc: bool = False) -> None:
        self.mod.launch("diag_sq", [a, b, partial, np.array(self.points, np.int64)],
                        (GRID, 1, 1), (BLOCK, 1, 1))
        self.mod.launch("diag_acc" if acc else "diag_sum",
                        [partial, out, np.array(GRID, np.int32)], (1, 1, 1), (BLOCK, 1, 1))

    def whole(self, x: np.ndarray, y: np.ndarray, partial: np.ndarray, out: np.ndarray,
              steps: int) -> tuple[np.ndarray, ...]:
        """``steps`` whole steps (diagnostic included) from copies: (the buffer the last step
        wrote, the other, partial, out)."""
        a, b, p, o = x.copy(), y.copy(), partial.copy(), out.copy()
        for _ in range(steps):
            self.stencil(a, b)
            for axis in range(3):
                self.boundary(b, axis)
            self.diag(a, b, p, o)
            a, b = b, a
        return a, b, p, o


def _target(step: Step, entry: str, layout: Mapping[int, tuple[str, int]],
            scalars: Mapping[int, np.ndarray], grid: tuple[int, int, int],
            block: tuple[int, int, int]) -> NumpyTarget:
    def k(b: dict[int, np.ndarray]) -> None:
        args = [b[i] if i in b else scalars[i] for i in range(len(layout) + len(scalars))]
        step.mod.launch(entry, args, grid, block)
    return NumpyTarget(k, dict(layout))


def _launch(step: Step, entry: str, ptrs: list[int], scalars: Mapping[int, np.ndarray],
            grid: tuple[int, int, int], block: tuple[int, int, int]) -> ec.Launch:
    """A companion launch whose pointer parameters hold the recorded pointers ``ptrs``."""
    k = step.points + SLACK
    sizes = {IN: (step.dtype, k), OUT: (step.dtype, k), PART: ("float64", GRID + 3),
             RES: ("float64", 2), COEF: ("float64", GRID + 3)}
    layout = {i: sizes[p] for i, p in enumerate(ptrs)}
    raw = b"".join(p.to_bytes(8, "little") for p in ptrs) + bytes(8 * len(scalars))
    slots = [Slot(8 * i, 8, True) for i in range(len(ptrs))] + \
        [Slot(8 * (len(ptrs) + i), 8) for i in range(len(scalars))]
    c = lc.companion(entry, raw, slots, IN, OUT)
    assert isinstance(c, lc.Companion), c
    t = _target(step, entry, layout, {len(ptrs) + i: v for i, v in enumerate(scalars.values())},
                grid, block)
    return ec.Launch(c, t, tuple(i for i, p in enumerate(ptrs) if p == IN),
                     tuple(i for i, p in enumerate(ptrs) if p == OUT),
                     {i: (REGION[p], 0) for i, p in enumerate(ptrs)},
                     {i: sizes[p][0] for i, p in enumerate(ptrs)})


def _step_launches(step: Step, sum_entry: str = "diag_sum", sq_entry: str = "diag_sq",
                   reorder: bool = False) -> list[ec.Launch]:
    n = step.n
    face = ((n + 7) // 8, (n + 7) // 8, 1)
    bc = [_launch(step, "apply_boundary", [OUT], {1: np.array(n, np.int32),
                                                  2: np.array(axis, np.int32),
                                                  3: np.array(step.hot, step.dt)},
                  face, (8, 8, 1)) for axis in range(3)]
    sq = _launch(step, sq_entry, [IN, OUT, PART], {3: np.array(step.points, np.int64)},
                 (GRID, 1, 1), (BLOCK, 1, 1))
    sm = _launch(step, sum_entry, [PART, RES], {2: np.array(GRID, np.int32)}, (1, 1, 1),
                 (BLOCK, 1, 1))
    return bc + ([sm, sq] if reorder else [sq, sm])


def _stencil(step: Step, coef: bool = False) -> list[ec.Span]:
    k = (step.points + SLACK) * step.dt.itemsize
    return [(0, 0, k), (1, 0, k)] + ([(4, 0, k)] if coef else [])


@pytest.fixture(scope="module")
def demo() -> tuple[Step, Recognized, tuple[lc.Companion, ...]]:
    step = Step(11)
    r = recognize(stencil_target(step))
    assert isinstance(r, Recognized), r
    comps = ec.classify(_step_launches(step), _stencil(step), r.shape, r.dtype)
    assert not isinstance(comps, lc.Refused), comps
    return step, r, comps


def test_the_demo_step_folds_its_boundaries_and_elides_its_reduction(demo: tuple) -> None:
    _, _, comps = demo
    assert [c.role for c in comps] == ["folded"] * 3 + ["elided"] * 2
    assert lc.groups(comps) == ((fc.Face(0, 0, 0, 1.0), fc.Face(0, 1, 1)),
                                (fc.Face(1, 0, 1), fc.Face(1, 1, 1)),
                                (fc.Face(2, 0, 1), fc.Face(2, 1, 1)))
    assert comps[3].elided == (lc.Written(2, 2, 0, 8 * GRID, "float64"),)  # partial, whole
    assert comps[4].elided == (lc.Written(1, 3, 0, 8, "float64"),)  # out[0], not out[1]
    ev = comps[3].evidence()
    assert ev["role"] == "elided" and ev["does"] == f"writes region 2 bytes [0, {8 * GRID}) " \
        "of float64" and ev["in_slots"] == [0] and ev["out_slots"] == [8]
    # the pointers to partial and out: wherever the deployed run puts them, as in its first step
    assert ev["same_slots"] == [16] and comps[4].spec()["same_slots"] == [0, 8]
    assert set(comps[0].evidence()) == {"name", "params", "in_slots", "out_slots", "role",
                                        "does"}


@pytest.mark.parametrize("steps", [3, pytest.param(5, marks=pytest.mark.slow)])
def test_t_fused_steps_then_one_original_equal_t_plus_1_steps(demo: tuple, steps: int
                                                               ) -> None:
    """What a deployment runs (the fused launch, then the held step as the original launches)
    against T+1 unfused steps with the diagnostic in every step, on every buffer."""
    step, r, comps = demo
    groups = lc.groups(comps)
    op = overlap.generate(r.cell, r.boundary, steps, ox=4, oy=4, oz=4, block=(8, 4, 2),
                          faces=groups)
    ad = fz.fused_adapter(op, r, DEMO_SLOTS, 24, steps)
    mod = em.compile_source(ad.source, [ad.entry])
    rng = np.random.default_rng(steps)
    x = rng.uniform(-1, 1, step.points).astype(np.float32)
    y = rng.uniform(2, 3, step.points).astype(np.float32)
    part0, out0 = rng.uniform(-9, 9, GRID + 3), rng.uniform(-9, 9, 2)
    want = step.whole(x, y, part0, out0, steps + 1)
    a, b, p, o = x.copy(), y.copy(), part0.copy(), out0.copy()
    mod.launch(ad.entry, [a, b, np.array(0.1, np.float32), np.array(step.n, np.int32)],
               ad.grid, ad.block, ad.shared_bytes)
    assert np.array_equal(a, x), "the fused kernel wrote into IN"
    assert np.array_equal(p, part0) and np.array_equal(o, out0)  # it writes no diagnostic
    got = step.whole(b, a, p, o, 1)  # the held step, as the originals
    scale = 3.0
    rtol, atol = fz.tolerance_steps(r, scale, steps + 1)
    for g, w in zip(got[:2], want[:2], strict=True):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    err = atol + rtol * scale
    for g, w in zip(got[2:], want[2:], strict=True):
        assert np.all(np.abs(g - w) <= diag_tolerance(w, err, step.points, "float64"))
    assert np.array_equal(got[2][GRID:], part0[GRID:]) and got[3][1] == out0[1]
    # an accumulating reduction (the elision a probe refuses) is far outside the bound
    acc = want[3][0] + sum(step.whole(x, y, part0, out0, k)[3][0] for k in range(1, steps + 1))
    assert abs(acc - got[3][0]) > 100 * diag_tolerance(want[3][:1], err, step.points,
                                                       "float64")[0]


def test_the_tolerance_of_a_sum_of_squares_is_a_bound() -> None:
    """Fields moved by at most E per point move sum((a - b)^2) by at most the bound, from
    above and below, and a doubled sum is outside it."""
    rng = np.random.default_rng(7)
    n, e = 5000, 1e-4
    a, b = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    d = float(np.sum((a - b) ** 2))
    tol = float(diag_tolerance(np.array([d]), e, n, "float64")[0])
    for sign in (1, -1):  # the worst case: every difference moved by 2E, away or toward
        s = np.sign(a - b) * sign
        moved = float(np.sum((a + e * s - (b - e * s)) ** 2))
        assert abs(moved - d) <= tol
        assert abs(moved - d) > 0.5 * tol or sign < 0  # not loose by orders of magnitude
    assert 2 * d - d > tol


def _refused(launches: list[ec.Launch], stencil: list[ec.Span], r: Recognized) -> str:
    got = ec.classify(launches, stencil, r.shape, r.dtype)
    assert isinstance(got, lc.Refused), got
    return got.reason


def test_refusals(demo: tuple) -> None:
    step, r, _ = demo
    why = _refused(_step_launches(step, sum_entry="diag_acc"), _stencil(step), r)
    assert why.startswith("diag_acc: what it leaves in parameter 1 depends on what the "
                          "buffer held before (it accumulates across steps"), why
    why = _refused(_step_launches(step, sq_entry="diag_into_out"), _stencil(step), r)
    assert why.startswith("diag_into_out: it writes parameter 1, the step's OUT"), why
    # the stencil's launch also points at a buffer the reduction writes (as a coefficient)
    sq = _launch(step, "diag_sq", [IN, OUT, COEF], {3: np.array(step.points, np.int64)},
                 (GRID, 1, 1), (BLOCK, 1, 1))
    why = _refused([sq], _stencil(step, coef=True), r)
    assert why.startswith("diag_sq: the stencil's launch reaches what it writes (region 4"), why
    why = _refused(_step_launches(step, reorder=True), _stencil(step), r)
    assert why.startswith("diag_sq: an elided kernel earlier in the step (diag_sum) reaches "
                          "what it writes (region 2"), why


def test_a_probe_tells_what_bytes_a_kernel_writes() -> None:
    """A numpy kernel writing out[1] from a grid, out[0] from its own old value: refused; one
    writing a value-dependent subset: refused; a constant table: elided."""
    def run(body: Callable[[dict[int, np.ndarray]], None]) -> object:
        t = NumpyTarget(body, {0: ("float32", 64), 1: ("float64", 4)})
        return ec.probe(t, (0,), (), "float32")

    def ok(b: dict[int, np.ndarray]) -> None:
        b[1][1] = float(np.sum(b[0] ** 2))
    masks = run(ok)
    assert isinstance(masks, dict) and np.flatnonzero(masks[1]).tolist() == list(range(8, 16))

    def keeps(b: dict[int, np.ndarray]) -> None:
        b[1][0] = b[1][0] * 0.5 + 1.0
    assert isinstance(run(keeps), lc.Refused)

    def some(b: dict[int, np.ndarray]) -> None:
        if b[0][0] > 0:
            b[1][2] = 1.0
    assert isinstance(run(some), lc.Refused)

    def table(b: dict[int, np.ndarray]) -> None:
        b[1][:] = np.arange(4.0)
    masks = run(table)
    assert isinstance(masks, dict) and masks[1].all()


def test_a_write_decided_by_a_test_of_the_values_is_refused() -> None:
    """Diagnostics whose write set depends on the values in states random ones never reach: a
    convergence flag set only while a step changes the grid more than a tolerance (a fused run
    would leave it unset when only an elided step changed), and a blow-up check (NaN or huge
    values). Each of these would be elided if probed from random states alone; one that adds
    every other step (a counter in its own buffer) and a compaction (the write set is where the
    values are) are refused from random states already."""
    def probe(body: Callable[[dict[int, np.ndarray]], None], dtype: str) -> object:
        t = NumpyTarget(body, {0: (dtype, 64), 1: (dtype, 64), 2: ("float64", 4)})
        return ec.probe(t, (0,), (1,), dtype)

    def not_converged(b: dict[int, np.ndarray]) -> None:
        if np.max(np.abs(b[1] - b[0])) > 1e-6:
            b[2][0] = 1.0

    def blew_up(b: dict[int, np.ndarray]) -> None:
        if not np.all(np.isfinite(b[1])) or np.max(np.abs(b[1])) > 1e6:
            b[2][1] = 1.0

    def relative(b: dict[int, np.ndarray]) -> None:  # |diff| above a share of |out|
        b[2][2] = float(np.sum(np.abs(b[1] - b[0]) > 1e-3 * np.abs(b[1])))

    def every_other(b: dict[int, np.ndarray]) -> None:  # a step counter in its own buffer
        b[2][3] += 1.0
        b[2][0] = b[2][0] + 1.0 if int(b[2][3]) % 2 else float(np.sum(b[1]))

    def compacted(b: dict[int, np.ndarray]) -> None:  # the indices of the points above 0.5
        at = np.flatnonzero(b[1] > 0.5)[:4]
        b[2][:at.size] = at

    for dtype in ("float32", "float64"):
        for body in (not_converged, blew_up, every_other, compacted):
            got = probe(body, dtype)
            assert isinstance(got, lc.Refused) and "depend" in got.reason, (body, dtype, got)
        masks = probe(relative, dtype)  # always written, whatever the count: elided
        assert isinstance(masks, dict) and np.flatnonzero(masks[2]).tolist() == list(range(16, 24))
