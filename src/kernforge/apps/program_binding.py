"""The binding of a lifted program to its kernel's parameters, from either lifting path.

:func:`bind_lifted` (lifted from source: the grid's extents are expressions over the integer
parameters, evaluated on the recorded values) and :func:`bind_probed` (lifted by probing: the
grid and each field's start were measured) both give a
:class:`~kernforge.stencil.program.binding.Binding`, which the code generators take.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from ..core import ConfigError
from ..stencil.program.binding import Binding, Placement
from .lift_probe import Probed
from .lift_regions import Lifted

FLOAT_BY_SIZE = {4: "float", 8: "double"}
HINT = "see docs/stencil-programs.md (Operators for lifted programs)"


def extent(text: str, values: Mapping[str, int]) -> int:
    """The value of an extent expression (``n``, ``n*n``, ``nx - 2``...) over named integers."""
    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return int(n.value)
        if isinstance(n, ast.Name):
            if n.id not in values:
                raise ConfigError(f"extent {text!r}: no value for {n.id!r}", hint=HINT)
            return int(values[n.id])
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Add):
                return a + b
            if isinstance(n.op, ast.Sub):
                return a - b
            if isinstance(n.op, ast.Mult):
                return a * b
            if isinstance(n.op, ast.FloorDiv | ast.Div) and b:
                return a // b
            if isinstance(n.op, ast.Mod) and b:
                return a % b
        raise ConfigError(f"extent {text!r}: cannot evaluate {ast.dump(n)}", hint=HINT)

    try:
        tree = ast.parse(text.replace("/", "//").replace("////", "//"), mode="eval")
    except SyntaxError:
        raise ConfigError(f"extent {text!r} is no integer expression", hint=HINT) from None
    return ev(tree)


def bind_lifted(lifted: Lifted, ints: Mapping[int, int], sizes: Mapping[int, int], *,
                constants: Mapping[str, Any] | None = None) -> Binding:
    """``lifted``'s binding for a launch whose integer parameters have the values ``ints``
    (parameter index -> value) and whose parameters take ``sizes`` bytes (index -> size: a
    scalar parameter of 4 bytes is a float, of 8 a double); ``constants``: the values of the
    ``__constant__`` variables the program reads (baked into the operator)."""
    values = {}
    for name, i in lifted.sizes.items():
        if i not in ints:
            raise ConfigError(f"no value for the integer parameter {name} ({i})", hint=HINT)
        values[name] = int(ints[i])
    ext = [extent(t, values) for t in lifted.extents]
    shape = tuple(ext + [1] * (3 - len(ext)))
    points = shape[0] * shape[1] * shape[2]
    fields = {n: Placement(p, lifted.components.get(n, 0) * points)
              for n, p in lifted.fields.items()}
    scalars = {}
    for i in lifted.program.params():
        if sizes.get(i) not in FLOAT_BY_SIZE:
            raise ConfigError(f"scalar parameter {i} takes {sizes.get(i)} bytes",
                              hint="a float or double parameter")
        scalars[i] = FLOAT_BY_SIZE[sizes[i]]
    return Binding((shape[0], shape[1], shape[2]), fields, dict(lifted.reductions), scalars,
                   dict(constants or {}), dict(lifted.tables))


def bind_probed(probed: Probed) -> Binding:
    """``probed``'s binding: its fields at their measured starts, its grid, its reductions
    (coefficient tables are numbers in its program: nothing to read)."""
    fields = {n: Placement(p, int(probed.offsets.get(n, 0))) for n, p in probed.fields.items()}
    nx, ny, nz = probed.shape
    return Binding((nx, ny, nz), fields, dict(probed.reductions))
