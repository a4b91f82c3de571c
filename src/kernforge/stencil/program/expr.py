"""Expressions of a stencil program (docs/stencil-programs.md): trees over taps of named fields.

Leaves: :class:`Const` (a number), :class:`Param` (a scalar kernel parameter, by its index in
the parameter list), :class:`ConstMem` (an element of a ``__constant__`` variable, by name) and
:class:`Tap` (a field read at an offset ``(dz, dy, dx)`` from the point being written). Inner
nodes: :class:`Bin` (``+ - * /``; a divisor holds no tap) and :class:`Neg`. Python's operators
build trees: ``0.25 * (Tap("u", (0, 0, 1)) + Tap("u", (0, 0, -1)))``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ...core import ConfigError

Offset = tuple[int, int, int]
OPS = ("+", "-", "*", "/")
Monomial = tuple[tuple[str, Offset], ...]  # sorted (field, offset) factors; () is the constant
T = TypeVar("T")


def _wrap(v: object) -> Expr:
    if isinstance(v, Expr):
        return v
    if isinstance(v, int | float) and not isinstance(v, bool):
        return Const(float(v))
    raise TypeError(f"not an expression: {v!r}")


class Expr:
    """Base of the expression nodes; arithmetic on them builds trees."""

    def __add__(self, o: object) -> Expr:
        return Bin("+", self, _wrap(o))

    def __radd__(self, o: object) -> Expr:
        return Bin("+", _wrap(o), self)

    def __sub__(self, o: object) -> Expr:
        return Bin("-", self, _wrap(o))

    def __rsub__(self, o: object) -> Expr:
        return Bin("-", _wrap(o), self)

    def __mul__(self, o: object) -> Expr:
        return Bin("*", self, _wrap(o))

    def __rmul__(self, o: object) -> Expr:
        return Bin("*", _wrap(o), self)

    def __truediv__(self, o: object) -> Expr:
        return Bin("/", self, _wrap(o))

    def __neg__(self) -> Expr:
        return Neg(self)


@dataclass(frozen=True)
class Const(Expr):
    value: float


@dataclass(frozen=True)
class Param(Expr):
    """The scalar kernel parameter at ``index`` (``name``: its name in the source, if known)."""

    index: int
    name: str = ""


@dataclass(frozen=True)
class ConstMem(Expr):
    """Element ``index`` of the ``__constant__`` array ``name``, or the scalar ``name``."""

    name: str
    index: int = 0
    array: bool = False


@dataclass(frozen=True)
class Tap(Expr):
    """``field`` at ``offset`` = (dz, dy, dx) from the point being written."""

    field: str
    offset: Offset = (0, 0, 0)


@dataclass(frozen=True)
class Bin(Expr):
    op: str
    a: Expr
    b: Expr


@dataclass(frozen=True)
class Neg(Expr):
    a: Expr


def tap(field: str, dz: int = 0, dy: int = 0, dx: int = 0) -> Tap:
    return Tap(field, (dz, dy, dx))


def children(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Bin):
        return (e.a, e.b)
    if isinstance(e, Neg):
        return (e.a,)
    return ()


def walk(e: Expr) -> Iterator[Expr]:
    """Every node of ``e``, itself first."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def taps(e: Expr) -> list[Tap]:
    return list(dict.fromkeys(n for n in walk(e) if isinstance(n, Tap)))


def is_scalar(e: Expr) -> bool:
    """True when ``e`` reads no field (the same value at every point)."""
    return not taps(e)


def evaluate(e: Expr, leaf: Callable[[Expr], Any]) -> Any:
    """``e`` with each leaf replaced by ``leaf(node)`` (numbers or numpy arrays)."""
    if isinstance(e, Bin):
        a, b = evaluate(e.a, leaf), evaluate(e.b, leaf)
        return a + b if e.op == "+" else a - b if e.op == "-" else a * b if e.op == "*" \
            else a / b
    if isinstance(e, Neg):
        return -evaluate(e.a, leaf)
    return leaf(e)


def scalar_value(e: Expr, params: Mapping[int, float], constants: Mapping[str, Any]) -> float:
    """The value of a leaf that is no tap, ConfigError when its value is not given."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Param):
        if e.index not in params:
            raise ConfigError(f"no value for scalar parameter {e.index} ({e.name or 'unnamed'})",
                              hint="pass params={index: value}")
        return float(params[e.index])
    if isinstance(e, ConstMem):
        if e.name not in constants:
            raise ConfigError(f"no value for __constant__ {e.name!r}",
                              hint="pass constants={name: value or sequence}")
        v = constants[e.name]
        if isinstance(v, int | float):
            if e.index or e.array:
                raise ConfigError(f"__constant__ {e.name!r} is a scalar, read at [{e.index}]",
                                  hint="pass a sequence for an array")
            return float(v)
        return float(v[e.index])
    raise ConfigError(f"not a scalar leaf: {e!r}", hint="a tap needs a field")


def polynomial(e: Expr, params: Mapping[int, float] | None = None,
               constants: Mapping[str, Any] | None = None) -> dict[Monomial, float]:
    """``e`` expanded into monomials of taps with numeric coefficients (scalars given)."""
    p = params if params is not None else {}
    c = constants if constants is not None else {}

    def go(n: Expr) -> dict[Monomial, float]:
        if isinstance(n, Tap):
            return {((n.field, n.offset),): 1.0}
        if isinstance(n, Neg):
            return {m: -v for m, v in go(n.a).items()}
        if isinstance(n, Bin):
            a, b = go(n.a), go(n.b)
            if n.op in "+-":
                s = 1.0 if n.op == "+" else -1.0
                out = dict(a)
                for m, v in b.items():
                    out[m] = out.get(m, 0.0) + s * v
                return out
            if n.op == "/":
                d = b.get((), 0.0)
                if set(b) - {()} or d == 0:
                    raise ConfigError("a division by a field or by zero",
                                      hint="divide only by constants or parameters")
                return {m: v / d for m, v in a.items()}
            out = {}
            for ma, va in a.items():
                for mb, vb in b.items():
                    m = tuple(sorted(ma + mb))
                    out[m] = out.get(m, 0.0) + va * vb
            return out
        return {(): scalar_value(n, p, c)}

    return {m: v for m, v in go(e).items() if v != 0.0}


def degree(e: Expr) -> int:
    """The polynomial degree of ``e`` in its taps (0: no tap)."""
    if isinstance(e, Tap):
        return 1
    if isinstance(e, Neg):
        return degree(e.a)
    if isinstance(e, Bin):
        if e.op == "*":
            return degree(e.a) + degree(e.b)
        if e.op == "/":
            return degree(e.a)
        return max(degree(e.a), degree(e.b))
    return 0


def to_json(e: Expr) -> Any:
    if isinstance(e, Const):
        return {"const": e.value}
    if isinstance(e, Param):
        return {"param": e.index, "name": e.name} if e.name else {"param": e.index}
    if isinstance(e, ConstMem):
        return {"cmem": e.name, "index": e.index, "array": e.array}
    if isinstance(e, Tap):
        return {"tap": e.field, "at": list(e.offset)}
    if isinstance(e, Bin):
        return {"op": e.op, "args": [to_json(e.a), to_json(e.b)]}
    if isinstance(e, Neg):
        return {"neg": to_json(e.a)}
    raise TypeError(f"not an expression: {e!r}")


def json_int(v: Any) -> int:
    """An integer of a JSON document: an int, not a bool, a fraction or a string."""
    if type(v) is not int:
        raise ValueError(f"{v!r} is not an integer")
    return v


def json_bool(v: Any) -> bool:
    """A boolean of a JSON document: true or false, not a string that reads like one."""
    if type(v) is not bool:
        raise ValueError(f"{v!r} is not true or false")
    return v


def from_json(d: Any) -> Expr:
    """The expression of :func:`to_json`; ConfigError on a malformed document."""
    try:
        if "const" in d:
            v = float(d["const"])
            if not math.isfinite(v):
                raise ValueError("not finite")
            return Const(v)
        if "param" in d:
            return Param(json_int(d["param"]), str(d.get("name", "")))
        if "cmem" in d:
            return ConstMem(str(d["cmem"]), json_int(d.get("index", 0)),
                            json_bool(d.get("array", False)))
        if "tap" in d:
            dz, dy, dx = (json_int(v) for v in d["at"])
            return Tap(str(d["tap"]), (dz, dy, dx))
        if "op" in d:
            a, b = d["args"]
            if d["op"] not in OPS:
                raise ValueError(f"operator {d['op']!r}")
            return Bin(str(d["op"]), from_json(a), from_json(b))
        if "neg" in d:
            return Neg(from_json(d["neg"]))
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError(f"malformed expression {d!r}: {exc}",
                          hint="see docs/stencil-programs.md for the JSON form") from None
    raise ConfigError(f"malformed expression {d!r}", hint="one of const, param, cmem, tap, "
                      "op, neg")


def describe(e: Expr) -> str:
    """A readable form: ``u[0,0,1]``, ``p3`` (or the parameter's name), ``c[2]``."""
    if isinstance(e, Const):
        return f"{e.value:.10g}"
    if isinstance(e, Param):
        return e.name or f"p{e.index}"
    if isinstance(e, ConstMem):
        return f"{e.name}[{e.index}]" if e.index or e.array else e.name
    if isinstance(e, Tap):
        return f"{e.field}[{','.join(str(o) for o in e.offset)}]"
    if isinstance(e, Neg):
        return f"-({describe(e.a)})"
    if isinstance(e, Bin):
        a, b = describe(e.a), describe(e.b)
        if e.op in "*/":
            a = f"({a})" if isinstance(e.a, Bin) and e.a.op in "+-" else a
            b = f"({b})" if isinstance(e.b, Bin) and (e.b.op in "+-" or e.op == "/") else b
        elif e.op == "-" and isinstance(e.b, Bin) and e.b.op in "+-":
            b = f"({b})"
        return f"{a} {e.op} {b}"
    raise TypeError(f"not an expression: {e!r}")


def reach(e: Expr) -> dict[str, int]:
    """How far the taps of ``e`` reach past each face: ``{"z-": 1, "x+": 2, ...}``."""
    out = dict.fromkeys(("z-", "z+", "y-", "y+", "x-", "x+"), 0)
    for t in taps(e):
        for axis, d in zip("zyx", t.offset, strict=True):
            side = f"{axis}-" if d < 0 else f"{axis}+"
            out[side] = max(out[side], abs(d))
    return out
