"""Stencil operators on the caller's arrays, through the product's cuda backend.

``kernforge.apply_stencil(cell, inp, out)`` runs the operator the dispatch table gives a cell
(or any :class:`~kernforge.stencil.operator.Operator`, e.g. one built for a spec with other
coefficients) on CuPy device arrays of the cell's shape ``(nz, ny, nx)`` and storage dtype.
Each launch is a ``kernforge.Kernel`` over the operator's variant
(:func:`kernforge.stencil.variant.variants`): compiled once by the cuda backend (NVRTC, as the
forge and the bench compile it), seen by recording observers, replaced by an active
deployment like any other kernel. Conventions (docs/stencil.md): ``out``'s boundary is preset
by the caller and comes back unchanged; a temporal operator needs ``tmp`` (a copy of ``out``
is made when it is not given).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backends.kernel import Kernel
from ..core import ConfigError
from ..stencil import matrix as mx
from ..stencil.operator import Operator
from ..stencil.spec import Cell, Precision, Shape, StencilSpec
from ..stencil.variant import LaunchVariant, variants

_PRECISIONS = {np.dtype(p.dtype): p for p in Precision}


def _cell(target: Cell | StencilSpec | str, inp: Any) -> Cell:
    if isinstance(target, Cell):
        return target
    if isinstance(target, str):
        return Cell.parse(target)
    nz, ny, nx = tuple(inp.shape) if len(inp.shape) == 3 else (1, *inp.shape)
    prec = _PRECISIONS.get(np.dtype(inp.dtype))
    if prec is None:
        raise ConfigError(f"no stencil precision stores {inp.dtype}",
                          hint="float16, float32 or float64 arrays")
    return Cell(target, Shape(nx, ny, nz), prec)


class OperatorKernel:
    """One operator, callable on device arrays: ``k(inp, out, coef=None, tmp=None)``."""

    def __init__(self, op: Operator, cell: Cell | None = None) -> None:
        self.op = op
        self.cell = cell
        self.launches: tuple[LaunchVariant, ...] = variants(op)
        self._kernels: list[Kernel] | None = None

    @classmethod
    def for_cell(cls, cell: Cell, table: dict[str, dict[str, Any]] | None = None
                 ) -> OperatorKernel:
        return cls(mx.operator_for(cell, table), cell)

    def kernels(self) -> list[Kernel]:
        if self._kernels is None:
            ks = []
            for lv in self.launches:
                k = Kernel(lv.variant.source, backend="cuda",
                           options=dict(lv.variant.options.values), launch=lv.variant.launch)
                if lv.carveout >= 0:  # a function attribute, as the forge sets it
                    k.compiled().handle.function.preferred_shared_memory_carveout = lv.carveout
                ks.append(k)
            self._kernels = ks
        return self._kernels

    def check(self, arrays: dict[str, Any]) -> None:
        if self.cell is None:
            return
        shape, dtype = self.cell.shape.array_shape, self.cell.precision.dtype
        allowed = {shape, shape[1:]} if shape[0] == 1 else {shape}  # a 2D grid as (ny, nx)
        for role, a in arrays.items():
            if a is None:
                continue
            if tuple(a.shape) not in allowed or np.dtype(a.dtype) != dtype:
                raise ConfigError(f"{self.cell.id}: {role} is {a.dtype}{list(a.shape)}, the "
                                  f"operator needs {dtype}{list(shape)}",
                                  hint="arrays of shape (nz, ny, nx), x contiguous")
            if not a.flags.c_contiguous:
                raise ConfigError(f"{self.cell.id}: {role} is not C-contiguous",
                                  hint="cupy.ascontiguousarray")
        if arrays.get("in") is not None and arrays.get("out") is not None and \
                arrays["in"].data.ptr == arrays["out"].data.ptr:
            raise ConfigError("in and out are the same array",
                              hint="an operator reads one grid and writes another")

    def __call__(self, inp: Any, out: Any, *, coef: Any = None, tmp: Any = None) -> Any:
        roles = {r for lv in self.launches for r in lv.args}
        if "coef" in roles and coef is None:
            raise ConfigError(f"{self.op.cell_id}: this operator reads coef",
                              hint="pass coef=, the coefficient field")
        if "tmp" in roles and tmp is None:
            tmp = out.copy()  # its boundary preset like out's
        arrays = {"in": inp, "out": out, "coef": coef, "tmp": tmp}
        self.check(arrays)
        for k, lv in zip(self.kernels(), self.launches, strict=True):
            k(*[arrays[r] for r in lv.args])
        return out


_CACHE: dict[tuple[str, str], OperatorKernel] = {}


def apply_stencil(target: Cell | StencilSpec | str | Operator, inp: Any, out: Any, *,
                  coef: Any = None, tmp: Any = None) -> Any:
    """Apply a cell's operator (a :class:`Cell`, its id, or a spec whose grid and precision are
    read from ``inp``; or an operator) to CuPy arrays; returns ``out``."""
    if isinstance(target, Operator):
        key = (target.cell_id, target.key)
        if key not in _CACHE:
            _CACHE[key] = OperatorKernel(target, _parsed(target.cell_id))
    else:
        cell = _cell(target, inp)
        key = (cell.id, "dispatch")
        if key not in _CACHE:
            _CACHE[key] = OperatorKernel.for_cell(cell)
    return _CACHE[key](inp, out, coef=coef, tmp=tmp)


def _parsed(cell_id: str) -> Cell | None:
    try:
        return Cell.parse(cell_id)
    except ConfigError:  # a custom spec's cell: its id names no registered stencil
        return None


__all__: Sequence[str] = ("OperatorKernel", "apply_stencil")
