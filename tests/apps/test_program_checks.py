"""The GPU path's acceptance checks (apps/program_checks.py) on the host emulator: a replay
stand-in whose recorded launch and fresh runs are the test kernel itself, and whose
replacement is the generated adapter; a correct operator is accepted, a wrong one refused with
the buffer that differs."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from kernforge.apps.probe import ProbeBuffer
from kernforge.apps.program_checks import moved_bytes, validate
from kernforge.stencil import emulate as em
from kernforge.stencil.program import codegen_plain as plain
from kernforge.stencil.program import codegen_tiled as tiled
from kernforge.stencil.program import expr as ex
from kernforge.stencil.program.model import Output, StencilProgram

from .lift_kernels import CASES
from .program_ops_helpers import args, contents, lifted, run_original, slots

pytestmark = pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")


class _Rec:
    def __init__(self, before: Mapping[int, np.ndarray], after: Mapping[int, np.ndarray]
                 ) -> None:
        self.before, self.after = before, after

    def expected(self, region: int) -> np.ndarray:
        return self.after[region]


class _Replay:
    def __init__(self, target: _Target) -> None:
        self.t = target
        self.rec = _Rec(target.prologue, target.recorded)

    def restore(self) -> None:
        self.t.state = {i: a.copy() for i, a in self.t.prologue.items()}


class _Target:
    """The parts of operator matching's ReplayTarget the checks use, on the emulator."""

    def __init__(self, entry: str) -> None:
        self.case = CASES[entry]
        typed = contents(self.case, 17)
        self.prologue = {i: a.view(np.uint8).copy() for i, a in typed.items()}
        after = run_original(self.case, typed)
        self.recorded = {i: a.view(np.uint8).copy() for i, a in after.items()}
        self.buffers = tuple(ProbeBuffer(i, a.size, not np.array_equal(a, self.recorded[i]), i)
                             for i, a in self.prologue.items())
        self.where = {i: (i, 0) for i in self.prologue}
        self.rp = _Replay(self)
        self.state = dict(self.prologue)

    def typed(self) -> dict[int, np.ndarray]:
        return {i: a.view(str(self.case.params[i][1])) for i, a in self.state.items()}

    def place(self, c: Mapping[int, np.ndarray]) -> None:
        self.rp.restore()
        for i, raw in c.items():
            self.state[i] = np.array(raw, dtype=np.uint8, copy=True)

    def read(self) -> dict[int, np.ndarray]:
        return {i: a.copy() for i, a in self.state.items()}

    def run(self, c: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        self.place(c)
        out = run_original(self.case, self.typed())
        self.state = {i: a.view(np.uint8).copy() for i, a in out.items()}
        return self.read()


def _adapter_run(t: _Target, k: object, p: StencilProgram, b: object) -> object:
    from kernforge.apps.program_adapter import program_adapter

    sl, total = slots(t.case)
    ad = program_adapter(k, p, b, sl, total)  # type: ignore[arg-type]
    mod = em.compile_source(ad.source, [ad.entry])

    def run() -> None:
        typed = t.typed()
        mod.launch(ad.entry, args(t.case, typed), ad.grid, ad.block, ad.shared_bytes)
    return run


@pytest.mark.parametrize("entry", ["jacobi_res", "sig3", "pair2d", "half2d"])
def test_a_correct_operator_is_accepted(entry: str) -> None:
    t = _Target(entry)
    r, b = lifted(entry)
    params = {i: float(t.case.params[i][1]) for i in b.scalars}  # type: ignore[arg-type]
    for k in (plain.generate(r.program, b, bx=8, by=4, bz=2),
              tiled.generate(r.program, b, tx=8, ty=2, py=2, lz=3)):
        why, done = validate(t, r.program, b, _adapter_run(t, k, r.program, b), params)
        assert why is None and len(done) == 3, (k.key, why)


def test_a_wrong_operator_is_refused() -> None:
    t = _Target("coef3d")
    r, b = lifted("coef3d")
    (o,) = r.program.outputs
    wrong = StencilProgram(r.program.dims, r.program.precision, r.program.fields,
                           (Output(o.field, ex.Bin("*", ex.Const(1.0001), o.expr)),),
                           r.program.reductions, r.program.faces)
    k = plain.generate(wrong, b)
    why, done = validate(t, r.program, b, _adapter_run(t, k, wrong, b), {3: 0.05})
    assert why and why.startswith("recorded outputs differ") and "param1" in why and not done


def test_moved_bytes_count_each_field_once() -> None:
    r, b = lifted("jacobi_res")  # f_old read, f written: two grids of fp32
    assert moved_bytes(r.program, b) == 2 * 13 * 13 * 4
    r, b = lifted("wave")  # u read, uprev read and written
    assert moved_bytes(r.program, b) == 3 * 12 * 9 * 8


def test_compare_names_the_first_buffer_that_differs_tail_bytes_included() -> None:
    from kernforge.apps.program_checks import DTYPE, compare

    t = _Target("coef3d")
    r, b = lifted("coef3d")
    dt = np.dtype(DTYPE[r.program.precision])
    (o,) = r.program.outputs
    out = b.fields[o.field].param
    tail = {p: np.concatenate([a, np.uint8([1, 2])]) for p, a in t.recorded.items()}
    assert compare(r.program, b, dt, tail, tail, {3: 0.05}, "x") is None
    bad = {p: a.copy() for p, a in tail.items()}
    bad[out][-1] = 9  # the bytes after the last whole element: bitwise
    assert compare(r.program, b, dt, bad, tail, {3: 0.05}, "x") == \
        f"x: param{out} tail: 1/2 elements differ (max abs 7, max rel 3.5, norm ratio 3.13, " \
        "NaN mismatches 0) first at index (1,)"
    bad[out][:dt.itemsize] = np.array([1e30], dtype=dt).view(np.uint8)  # and the grid
    why = compare(r.program, b, dt, bad, tail, {3: 0.05}, "x")
    assert why is not None and why.startswith(f"x: param{out}: 1/") and "tail" not in why
