"""The stencil oracle plugged into the harness's checker: how every forge, bench, probe and
operator-unit check judges an operator's output.

:func:`checker` is an :class:`~kernforge.harness.checkers.OracleChecker` whose reference is
:func:`kernforge.stencil.oracle.compared` (the float64 oracle in full on small grids, sampled
on big ones, and the boundary left as the input's) and whose bound is the cell's precision
gate (``cell.precision.tolerance``) on the scale-invariant error ``max|out - ref| / max|ref|``.
:func:`check` and :func:`check_sampled` run it on one output (``out``: the full grid or only
its interior) with the cell's fields as inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..harness.checkers import CheckResult, Comparison, OracleChecker, Part, Reference
from ..stencil import oracle
from ..stencil.spec import Cell

DEFAULT_POINTS = oracle.DEFAULT_POINTS


def stencil_reference(cell: Cell, *, points: int = DEFAULT_POINTS, full: bool | None = None,
                      slabs: bool = True, seed: int | None = None) -> Reference:
    """The oracle as a reference function: the output named ``out`` against the oracle on
    the inputs ``in`` (and ``coef``)."""
    def reference(outputs: Mapping[str, Any], inputs: Mapping[str, Any]) -> Comparison:
        pairs, detail = oracle.compared(cell, inputs, outputs["out"], points=points, full=full,
                                        slabs=slabs, seed=seed)
        return Comparison([Part(*p) for p in pairs], detail)
    return reference


def checker(cell: Cell, *, seed: int | None = None, points: int = DEFAULT_POINTS,
            full: bool | None = None, slabs: bool = True) -> OracleChecker:
    """The oracle's checker of ``cell`` (``seed``: the inputs', recorded, and the sample's)."""
    return OracleChecker(stencil_reference(cell, points=points, full=full, slabs=slabs,
                                           seed=seed),
                         cell.precision.tolerance, seed=seed)


def check(cell: Cell, fields: Mapping[str, Any], out: Any, *, seed: int | None = None,
          points: int = DEFAULT_POINTS, full: bool | None = None) -> CheckResult:
    """``out`` against the oracle on ``fields``; ``full`` None: in full up to
    :data:`kernforge.stencil.oracle.FULL_LIMIT` grid points, sampled above."""
    return checker(cell, seed=seed, points=points, full=full).check({"out": out}, fields)


def check_sampled(cell: Cell, fields: Mapping[str, Any], out: Any, *, seed: int | None = None,
                  points: int = DEFAULT_POINTS, slabs: bool = True) -> CheckResult:
    """The sampled check (slabs, ``points`` random points, the boundary) at any grid size."""
    return checker(cell, seed=seed, points=points, full=False, slabs=slabs).check(
        {"out": out}, fields)
