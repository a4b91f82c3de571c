"""How the forge's search of a lifted program judges a candidate's outputs: the harness's
:class:`~kernforge.harness.checkers.OracleChecker`, one per written field and per reduction.

A launch's arguments are arrays by argument name (a field's or reduction's name, a scalar
parameter's index as text, a table's name), as a generated kernel's
:class:`~kernforge.stencil.program.codegen.Arg` s name them. :func:`fresh` makes random ones
(every grid uniform in [-1, 1) in the program's precision, every reduction's scalar 0.75).
:func:`oracle_want` is what the float64 oracle computes from the arguments before the launch;
the caller may instead give what a recorded launch left (:class:`Recorded`).
:func:`judge` compares the candidate's arguments after its launch with that: per written
field the scale-invariant error ``max|out - ref| / max|ref|`` under the bound
``2 max(bound) / max|ref|`` (``bound``: :func:`~kernforge.stencil.program.error_bound` on the
inputs, what any order of operations may make), per reduction the relative error under
``(4 sqrt(N) + 128) eps``, and every field no output writes unchanged bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..harness.checkers import CheckResult, Comparison, OracleChecker, Part, Reference
from ..stencil.program import StencilProgram, apply, error_bound
from ..stencil.program.binding import Binding
from ..stencil.program.oracle import EPS

DTYPE = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}
SCALAR = {"float": np.float32, "double": np.float64}
REDUCTION_START = 0.75  # a reduction's scalar before a fresh launch (accumulated onto)


@dataclass(frozen=True)
class Recorded:
    """A recorded launch: its arguments before and after, by argument name."""

    before: Mapping[str, np.ndarray]
    after: Mapping[str, np.ndarray]


def grid_shape(p: StencilProgram, b: Binding) -> tuple[int, ...]:
    """The grid as the oracle takes it: (nz, ny, nx) less the axes the program has not."""
    nx, ny, nz = b.shape
    return (nz, ny, nx)[3 - p.dims:]


def fresh(p: StencilProgram, b: Binding, params: Mapping[int, float],
          tables: Mapping[str, Sequence[float]], seed: int) -> dict[str, np.ndarray]:
    """Random arguments of one launch (module docstring)."""
    rng = np.random.default_rng(seed)
    dt = DTYPE[p.precision]
    out: dict[str, np.ndarray] = {}
    for f in p.fields:
        out[f.name] = rng.uniform(-1, 1, b.points).astype(dt)
    for r in p.reductions:
        out[r.name] = np.full(1, REDUCTION_START, dtype=dt)
    for i in p.params():
        out[str(i)] = np.array(params[i], dtype=SCALAR[b.scalars[i]])
    for name in b.tables:
        out[name] = np.asarray(tables[name], dtype=dt)
    return out


def _grids(p: StencilProgram, b: Binding, args: Mapping[str, np.ndarray]
           ) -> dict[str, np.ndarray]:
    shape = grid_shape(p, b)
    return {f.name: np.asarray(args[f.name], dtype=np.float64).reshape(shape)
            for f in p.fields}


def _constants(b: Binding, args: Mapping[str, np.ndarray]) -> dict[str, Any]:
    return {**b.constants, **{n: [float(v) for v in np.asarray(args[n], dtype=np.float64)]
                              for n in b.tables}}


def oracle_want(p: StencilProgram, b: Binding, params: Mapping[int, float],
                before: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What one launch of ``p`` leaves in its written fields and reductions, in float64,
    from the arguments ``before`` it."""
    res = apply(p, _grids(p, b, before), params=params, constants=_constants(b, before),
                reductions={r.name: float(before[r.name][0]) for r in p.reductions})
    return {**res.outputs, **{n: np.array([v]) for n, v in res.reductions.items()}}


def against(name: str, ref: np.ndarray) -> Reference:
    """The reference that compares the output ``name`` with ``ref``."""
    def reference(outputs: Mapping[str, Any], _inputs: Mapping[str, Any]) -> Comparison:
        return Comparison([Part(name, outputs.get(name), ref)])
    return reference


def judge(p: StencilProgram, b: Binding, params: Mapping[int, float],
          before: Mapping[str, np.ndarray], after: Mapping[str, np.ndarray],
          want: Mapping[str, np.ndarray], *, seed: int | None = None) -> list[CheckResult]:
    """The candidate's arguments ``after`` its launch on ``before`` against ``want`` (the
    oracle's, or a recorded launch's), one :class:`CheckResult` per written field and
    reduction, then one for the fields no output writes (module docstring)."""
    shape = grid_shape(p, b)
    grids = _grids(p, b, before)
    bound = error_bound(p, grids, params=params, constants=_constants(b, before))
    results = []
    for o in p.outputs:
        ref = np.asarray(want[o.field], dtype=np.float64).reshape(shape)
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        tol = 2 * float(np.max(bound[o.field])) / scale if scale > 0 else 0.0
        got = np.asarray(after[o.field], dtype=np.float64).reshape(shape)
        results.append(OracleChecker(against(o.field, ref), tol, seed=seed)
                       .check({o.field: got}))
    rtol = (4 * math.sqrt(b.points) + 128) * EPS[p.precision]
    for r in p.reductions:
        ref = np.asarray(want[r.name], dtype=np.float64).reshape(1)
        got = np.asarray(after[r.name], dtype=np.float64).reshape(1)
        results.append(OracleChecker(against(r.name, ref), rtol, seed=seed)
                       .check({r.name: got}))
    kept = [f.name for f in p.fields if f.name not in {o.field for o in p.outputs}]
    if kept:
        parts = [Part(n, np.asarray(after[n]), np.asarray(before[n]), exact=True)
                 for n in kept]
        results.append(OracleChecker(lambda _o, _i: Comparison(parts, {"unchanged": kept}),
                                     0.0, seed=seed).check({}))
    return results


def verdict(results: Sequence[CheckResult], what: str) -> str | None:
    """Why the checks failed (the first failing one described), None when all passed."""
    for r in results:
        if r.ok:
            continue
        changed = [f"{n} at {r.detail[n]} points" for n in r.detail.get("unchanged", ())
                   if r.detail.get(n)]
        if changed:
            return f"{what}: a field no output writes changed: {', '.join(changed)} " \
                   f"(first {r.where})"
        return f"{what}: {r.describe()}" + (
            f" ({r.detail['mismatch']})" if r.detail.get("mismatch") else "")
    return None


def worst(results: Sequence[CheckResult]) -> float:
    """The largest error of the checks that have a tolerance above 0."""
    return max((r.error for r in results if r.tolerance), default=0.0)
