"""The scalar outputs of a probed kernel (:mod:`.lift_probe`): which residual each one is.

Tried in order, per scalar buffer: over the points the program computes, then over all
points, the sum of squares, the sum and the max-abs of each output's new value minus each
field it reads (at the point), then of the output itself; accumulated onto the scalar's old
value (runs with different old values tell), or written. The first form both runs agree
with, within the reordering error of a sum of that many terms, is the reduction.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..stencil.program import Reduction, StencilProgram, apply
from ..stencil.program import expr as ex

if TYPE_CHECKING:
    from .lift_probe import _Lifter

BEFORE = (0.0, 0.75, 1000.0)


def _forms(prog: StencilProgram) -> Iterator[tuple[str, ex.Expr, str]]:
    reads = prog.names("in", "coef", "inout")
    for over in ("computed", "all"):
        for op in ("sumsq", "sum", "maxabs"):
            for o in prog.outputs:
                for f in reads:
                    if f != o.field:
                        yield op, ex.Tap(o.field) - ex.Tap(f), over
                yield op, ex.Tap(o.field), over


def scalar_outputs(lf: _Lifter, prog: StencilProgram, used: set[str]
                   ) -> tuple[Reduction, ...]:
    from .lift_probe import _Fail

    if not lf.scalars:
        return ()
    runs: list[tuple[float, dict[str, np.ndarray], dict[int, np.ndarray]]] = []
    for before in BEFORE:
        x = lf.random()
        y, _ = lf.run(x, scalars=before)
        runs.append((before, {nm: lf.grid(x, nm).reshape(lf.grid(x, nm).shape[3 - prog.dims:])
                              for nm in used}, y))
    eps = float(np.finfo(lf.dt).eps)
    reds = []
    for b in lf.scalars:
        name = f"p{b.param}"
        for before, _, y in runs:
            if not np.all(y[b.param][1:] == np.float64(lf.dt.type(before))):
                raise _Fail(f"the kernel writes {y[b.param].size} scalars into parameter "
                            f"{b.param}; one residual per buffer is lifted")
        found = None
        for op, e, over in _forms(prog):
            vals = []
            for before, fields, y in runs:
                r = Reduction(name, op, e, False, over)
                p = StencilProgram(prog.dims, prog.precision, prog.fields, prog.outputs, (r,),
                                   prog.faces)
                vals.append((before, apply(p, fields).reductions[name], float(y[b.param][0])))
            for acc in (True, False):
                if all(_close(_total(op, acc, before, v), got, eps, lf.n)
                       for before, v, got in vals):
                    found = Reduction(name, op, e, acc, over)
                    break
            if found:
                break
        if found is None:
            raise _Fail(f"the scalar in parameter {b.param} is none of the residuals tried "
                        "(sum, sum of squares or max-abs of an output or of its change)")
        reds.append(found)
    return tuple(reds)


def _total(op: str, acc: bool, before: float, v: float) -> float:
    if not acc:
        return v
    return max(before, v) if op == "maxabs" else before + v


def _close(want: float, got: Any, eps: float, n: int) -> bool:
    return math.isclose(got, want, rel_tol=max(1e-12, 64 * eps * math.sqrt(n)), abs_tol=1e-12)
