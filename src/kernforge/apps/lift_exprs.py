"""Expressions of a kernel's body, evaluated symbolically for one thread (for
:mod:`.lift_source`): integer values as :class:`~.lift_symbolic.Lin`, floating-point values as
program expressions whose loads are :class:`~.lift_symbolic.Read`, conditions as
:class:`~.lift_symbolic.Pred`, pointers as :class:`Ptr`."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any

from .. import syntax
from ..stencil.program import expr as ex
from .lift_points import min_max
from .lift_regions import Store
from .lift_symbolic import FALSE, TRUE, Lin, Poly, Pred, Read, Symbols, Unliftable, normalize

FLOAT_TYPES = {"float": "fp32", "double": "fp64", "half": "fp16", "__half": "fp16"}
INT_TYPES = {"int", "unsigned", "long", "short", "char", "bool", "size_t", "int32_t",
             "uint32_t", "int64_t", "uint64_t", "unsigned int", "long long", "ptrdiff_t"}
MAX_UNROLL = 64
_BUILTIN = {"threadIdx": "tid", "blockIdx": "bid", "blockDim": "bdim"}
_BITS = {">>": operator.rshift, "<<": operator.lshift, "&": operator.and_,
         "|": operator.or_, "^": operator.xor}
_CMP = ("<", "<=", ">", ">=", "==", "!=")
_FMA = ("fma", "fmaf", "__fmaf_rn", "__fma_rn", "__hfma")
_CASTS = ("__float2half", "__float2half_rn", "__half2float", "__double2float_rn", "__int2float_rn")
_ARITH = {"__fadd_rn": "+", "__dadd_rn": "+", "__fsub_rn": "-", "__dsub_rn": "-",
          "__fmul_rn": "*", "__dmul_rn": "*", "__hadd": "+", "__hsub": "-", "__hmul": "*"}


@dataclass(frozen=True)
class Ptr:
    name: str
    param: int
    offset: Lin
    precision: str


@dataclass(frozen=True)
class Poison:
    """A variable whose value the lifter cannot follow (an error only where it is used)."""

    why: str


class Exprs:
    """The state of one thread and the evaluation of expressions; statements: the walker."""

    def __init__(self, constants: dict[str, bool], typedefs: dict[str, str],
                 precision: str | None) -> None:
        self.constants, self.typedefs, self.forced = constants, typedefs, precision
        self.env: dict[str, Any] = {}
        self.live: Pred = TRUE
        self.stores: list[Store] = []
        self.params: dict[str, tuple[int, str]] = {}  # name -> (index, "ptr:fp32"/"int"/"fp64")
        self.syms = Symbols()
        self.precisions: set[str] = set()
        self.loops = 0
        self.stored: dict[tuple[str, Poly], tuple[Pred, ex.Expr]] = {}

    def precision(self) -> str:
        if len(self.precisions) > 1:
            raise Unliftable(f"buffers of different precisions {sorted(self.precisions)}")
        if not self.precisions:
            raise Unliftable("the kernel has no floating-point buffer")
        return self.precisions.pop()

    def _scalar_type(self, t: str) -> str:
        t = re.sub(r"\b(const|volatile|__restrict__|__restrict|restrict|struct)\b", "", t)
        t = " ".join(t.split())
        t = self.typedefs.get(t, t)
        if t in FLOAT_TYPES:
            return FLOAT_TYPES[t]
        if t in INT_TYPES or t.startswith(("unsigned", "long")):
            return "int"
        if self.forced and re.fullmatch(r"\w+", t):
            return self.forced
        if re.fullmatch(r"[A-Z]\w{0,2}", t):
            raise Unliftable(f"element type {t!r} is a template parameter (its instantiation "
                             "gives the precision: precision=)")
        raise Unliftable(f"element type {t!r} is no float, double, half or integer type (a "
                         "struct or vector element: the model holds grids of scalars)")

    def _as(self, v: Any, kind: str) -> Any:
        if kind == "int" and isinstance(v, ex.Expr):
            raise Unliftable("a floating-point value converted to an integer")
        if kind != "int" and isinstance(v, Lin):
            return self.to_float(v)
        return v

    def merge(self, c: Pred, a: Any, b: Any) -> Any:
        """The value of ``c ? a : b``."""
        if a == b:
            return a
        if isinstance(a, Pred) and isinstance(b, Pred):
            return (c & a) | (~c & b)
        if isinstance(a, Lin) and a.poly.constant() is not None and isinstance(b, Lin) \
                and b.poly.constant() is not None and {a.poly.constant(), b.poly.constant()} \
                <= {0, 1}:
            return (c if a.poly.constant() else ~c)  # an int flag: a predicate
        if isinstance(a, Lin) and isinstance(b, Lin):
            try:
                return self.clamp(c, a, b, f"{a.poly.text()} or {b.poly.text()}")
            except Unliftable as exc:
                return Poison(str(exc))
        for x, y, g in ((a, b, c), (b, a, ~c)):
            if isinstance(x, Read) and isinstance(y, ex.Const | Lin) and \
                    self.to_expr(y) == ex.Const(0.0):
                return Read(x.ptr, x.param, x.index, x.guard & g)
        return Poison("a value that depends on a condition other than a bound check "
                      f"({_short(a)} or {_short(b)})")

    # --- expressions ---------------------------------------------------------------------
    def value_of(self, name: str) -> Any:
        if name in self.env:
            v = self.env[name]
            if isinstance(v, Poison):
                raise Unliftable(v.why)
            return v
        if name in self.constants:
            if self.constants[name]:
                raise Unliftable(f"the __constant__ array {name} used without an index")
            return ex.ConstMem(name)
        raise Unliftable(f"the identifier {name!r} (a global or an unexpanded macro)")

    def value(self, n: Any) -> Any:
        t = n.type
        if t == "number_literal":
            return _number(syntax.text(n))
        if t in ("true", "false"):
            return TRUE if t == "true" else FALSE
        if t == "identifier":
            return self.value_of(syntax.text(n))
        if t == "parenthesized_expression":
            return self.value(n.named_children[0])
        if t == "field_expression":
            base = syntax.text(n.child_by_field_name("argument"))
            f = syntax.text(n.child_by_field_name("field"))
            if (base in _BUILTIN or base == "gridDim") and f in "xyz":
                return Lin(Poly.sym(f"{_BUILTIN.get(base, 'gdim')}.{f}"))
            raise Unliftable(f"the member access {base}.{f}")
        if t == "cast_expression":
            v = self.value(n.child_by_field_name("value"))
            kind = self._scalar_type(syntax.text(n.child_by_field_name("type")))
            return self._as(v, kind)
        if t == "unary_expression":
            op = syntax.text(n.child_by_field_name("operator"))
            v = self.value(n.child_by_field_name("argument"))
            if op == "!":
                return ~self._pred(v)
            if op == "-":
                return Lin(-v.poly, v.wraps) if isinstance(v, Lin) else -self.to_expr(v)
            return v
        if t == "binary_expression":
            op = syntax.text(n.child_by_field_name("operator"))
            if op in _CMP or op in ("&&", "||"):
                return self.cond(n)
            x, y = self.value(n.child_by_field_name("left")), \
                self.value(n.child_by_field_name("right"))
            if op in ("&", "|") and isinstance(x, Pred) and isinstance(y, Pred):
                return x & y if op == "&" else x | y  # (i >= 4 & j >= 4): conditions
            return self._arith(op, x, y)
        if t in ("subscript_expression", "pointer_expression"):
            if t == "pointer_expression" and syntax.text(n).startswith("&"):
                return self.address(n.child_by_field_name("argument"))
            if t == "subscript_expression":
                arr = syntax.text(n.child_by_field_name("argument"))
                if arr in self.constants and arr not in self.env:
                    k = self.index(n).poly.constant()
                    if k is None:
                        raise Unliftable(f"the __constant__ array {arr} read at a varying index")
                    return ex.ConstMem(arr, k, True)
            p = self.address(n)
            self.precisions.add(p.precision)
            return self.load(p)
        if t == "conditional_expression":
            c = self.cond(n.child_by_field_name("condition"))
            a = self.value(n.child_by_field_name("consequence"))
            b = self.value(n.child_by_field_name("alternative"))
            if isinstance(a, Lin) and isinstance(b, Lin) and a != b:
                return self.clamp(c, a, b, syntax.text(n))
            v = self.merge(c, a, b)
            if isinstance(v, Poison):
                raise Unliftable(v.why)
            return v
        if t == "call_expression":
            return self.call(n)
        raise Unliftable(f"the expression {syntax.text(n)[:40]!r} ({t.replace('_', ' ')})")

    def clamp(self, c: Pred, a: Lin, b: Lin, text: str) -> Lin:
        """``c ? a : b`` for indices: a ``max``/``min`` decided for every thread; else ``a`` a
        coordinate plus a constant, ``b`` what replaces it where ``c`` fails (checked later to
        be ``a`` clamped to the grid)."""
        if not (a.clamps or b.clamps or a.wraps or b.wraps):
            chosen = min_max(c, a.poly, b.poly)
            if chosen is not None:
                return Lin(chosen)
        s = _coordinate(a)
        if s is None or a.clamps or b.clamps or a.wraps or b.wraps:
            raise Unliftable(f"a conditional index ({text[:50]!r}) that is no clamp of a "
                             "neighbour's coordinate")
        return Lin(a.poly, frozenset(), frozenset({(s, c, normalize(a.poly),
                                                    normalize(b.poly))}))

    def call(self, n: Any) -> Any:
        fname = syntax.text(n.child_by_field_name("function"))
        args = [self.value(a) for a in n.child_by_field_name("arguments").named_children]
        if fname == "__ldg" and len(args) == 1 and isinstance(args[0], Ptr):
            return self.load(args[0])
        if fname in _CASTS and len(args) == 1:
            return args[0]
        if fname in ("min", "max") and len(args) == 2 and all(isinstance(a, Lin) for a in args):
            a, b = args if _coordinate(args[0]) else args[::-1]
            return self.clamp(Pred("<" if fname == "min" else ">", normalize(a.poly),
                                   normalize(b.poly)), a, b, syntax.text(n))
        if fname in _FMA and len(args) == 3:
            return self._arith("+", self._arith("*", args[0], args[1]), args[2])
        if fname in _ARITH and len(args) == 2:
            return self._arith(_ARITH[fname], args[0], args[1])
        if fname.startswith("atomic"):
            raise Unliftable(f"{fname} (atomics other than atomicAdd of a scalar)")
        raise Unliftable(f"a call to {fname} (a program is built of + - * and / by scalars)")

    def load(self, p: Ptr) -> ex.Expr:
        """A load; of an element this thread stored before, the value it stored."""
        hit = self.stored.get((p.name, normalize(p.offset.poly)))
        if hit is None:
            return Read(p.name, p.param, p.offset)
        if hit[0] != self.live:
            raise Unliftable(f"{p.name} is read back under another condition than the one "
                             "it was stored under")
        return hit[1]

    def index(self, n: Any) -> Lin:
        idx = n.child_by_field_name("indices") or n.child_by_field_name("index")
        kids = idx.named_children if idx.type == "subscript_argument_list" else [idx]
        if len(kids) != 1:
            raise Unliftable(f"the subscript {syntax.text(n)!r}")
        v = self.value(kids[0])
        if not isinstance(v, Lin):
            raise Unliftable(f"a subscript that is not an integer ({syntax.text(n)[:40]!r})")
        return v

    def address(self, n: Any) -> Ptr:
        """The buffer and element an lvalue (``p[i]``, ``*p``, ``*(p + i)``) names."""
        if n.type == "subscript_expression":
            base = self.value(n.child_by_field_name("argument"))
            if not isinstance(base, Ptr):
                raise Unliftable(f"an array that is no kernel buffer "
                                 f"({syntax.text(n)[:40]!r})")
            return Ptr(base.name, base.param, base.offset + self.index(n), base.precision)
        if n.type == "pointer_expression" and syntax.text(n).startswith("*"):
            p = self.value(n.child_by_field_name("argument"))
            if isinstance(p, Ptr):
                return p
        if n.type == "parenthesized_expression":
            return self.address(n.named_children[0])
        raise Unliftable(f"a store or load through {syntax.text(n)[:40]!r}")

    def _arith(self, op: str, a: Any, b: Any) -> Any:
        if isinstance(a, Ptr) and isinstance(b, Lin) and op in "+-":
            off = b if op == "+" else Lin(-b.poly, b.wraps)
            return Ptr(a.name, a.param, a.offset + off, a.precision)
        if isinstance(a, Lin) and isinstance(b, Lin):
            return self._int(op, a, b)
        if op not in ("+", "-", "*", "/"):
            raise Unliftable(f"the operator {op} on floating-point values")
        x, y = self.to_expr(a), self.to_expr(b)
        if op == "/" and not ex.is_scalar(y):
            raise Unliftable("a division by a value read from a buffer")
        return _fold(op, x, y)

    def _int(self, op: str, a: Lin, b: Lin) -> Lin:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return Lin(normalize(a.poly * b.poly), a.wraps | b.wraps, a.clamps | b.clamps)
        if a.clamps or b.clamps:
            raise Unliftable(f"the index operation {op} on a clamped index")
        ca, cb = a.poly.constant(), b.poly.constant()
        if op in _BITS and ca is not None and cb is not None and cb >= 0:
            return Lin(Poly.const(int(_BITS[op](ca, cb))))
        if op in ("<<", ">>") and cb is not None and 0 <= cb < 32:  # by a power of two
            return self._int("*" if op == "<<" else "/", a, Lin(Poly.const(1 << cb)))
        if op in ("/", "%") and ca is not None and cb:
            return Lin(Poly.const(int(ca / cb) if op == "/" else ca - cb * int(ca / cb)))
        if op not in ("/", "%") or b.poly.symbols() - _params(b.poly):
            raise Unliftable(f"the index operation {op} (only +, -, * and / or % by sizes)")
        p = normalize(a.poly)
        if len(p.terms) == 1 and p.terms[0][1] == 1 and len(p.terms[0][0]) == 1:
            d = self.syms.split(p.terms[0][0][0], b.poly)
            return Lin(Poly.sym(d.lo if op == "%" else d.hi))
        if op == "%":
            for s in p.symbols() - _params(p):
                if p.coefficient(s) == Poly.const(1) and p.degree_in([s]) == 1:
                    rest = p - Poly.sym(s)
                    c = rest.constant()
                    k, c2 = _split_const(rest, b.poly)
                    if c is not None or k is not None:
                        shift = c if c is not None else c2
                        return Lin(Poly.sym(s) + Poly.const(shift),
                                   a.wraps | {(s, b.poly)})
        raise Unliftable(f"the index operation ({p.text()}) {op} ({b.poly.text()})")

    def cond(self, n: Any) -> Pred:
        if n.type in ("condition_clause", "parenthesized_expression"):
            return self.cond(n.named_children[0])
        if n.type == "binary_expression":
            op = syntax.text(n.child_by_field_name("operator"))
            if op in ("&&", "||"):
                a = self.cond(n.child_by_field_name("left"))
                b = self.cond(n.child_by_field_name("right"))
                return a & b if op == "&&" else a | b
            if op in _CMP:
                a = self.value(n.child_by_field_name("left"))
                b = self.value(n.child_by_field_name("right"))
                if not isinstance(a, Lin) or not isinstance(b, Lin):
                    raise Unliftable(f"a branch on data ({syntax.text(n)[:50]!r})")
                return Pred(op, normalize(a.poly), normalize(b.poly))
        return self._pred(self.value(n))

    def _pred(self, v: Any) -> Pred:
        if isinstance(v, Pred):
            return v
        if isinstance(v, Lin):
            c = v.poly.constant()
            return (TRUE if c else FALSE) if c is not None else Pred("!=", v.poly, Poly())
        raise Unliftable("a branch on data (a floating-point condition)")

    def to_float(self, v: Lin) -> ex.Expr:
        c = v.poly.constant()
        if c is not None:
            return ex.Const(float(c))
        syms = v.poly.symbols()
        if len(v.poly.terms) == 1 and v.poly.terms[0] == ((next(iter(syms)),), 1) \
                and next(iter(syms)).startswith("$"):
            name = next(iter(syms))[1:]
            return ex.Param(self.params[name][0], name)
        raise Unliftable(f"an index used as a number ({v.poly.text()})")

    def to_expr(self, v: Any) -> ex.Expr:
        if isinstance(v, ex.Expr):
            return v
        if isinstance(v, Lin):
            return self.to_float(v)
        raise Unliftable(f"{_short(v)} used as a number")


def _coordinate(v: Lin) -> str | None:
    """The symbol ``s`` of ``v = s + constant`` (no parameter), else None."""
    p = normalize(v.poly)
    syms = [s for s in p.symbols() if not s.startswith("$")]
    if len(syms) != 1 or p.coefficient(syms[0]) != Poly.const(1) or \
            (p - Poly.sym(syms[0])).constant() is None:
        return None
    return syms[0]


def _fold(op: str, x: ex.Expr, y: ex.Expr) -> ex.Expr:
    """``x op y`` without the neutral terms unrolled loops and zero-initialized sums leave."""
    zx, zy = x == ex.Const(0.0), y == ex.Const(0.0)
    if op == "+" and (zx or zy):
        return y if zx else x
    if op == "-" and zy:
        return x
    if op == "*" and (zx or zy):
        return ex.Const(0.0)
    if op in "*/" and y == ex.Const(1.0):
        return x
    if op == "*" and x == ex.Const(1.0):
        return y
    return ex.Bin(op, x, y)


def _params(p: Poly) -> set[str]:
    return {s for s in p.symbols() if s.startswith("$")}


def _split_const(rest: Poly, mod: Poly) -> tuple[int | None, int]:
    """``rest = k*mod + c`` with integers k, c: (k, c), else (None, 0)."""
    c = rest.d().get((), 0)
    q = rest - Poly.const(c)
    for k in (1, -1, 2, -2):
        if q == mod * Poly.const(k):
            return k, c
    return None, 0


def _number(t: str) -> Any:
    s = t.rstrip("uUlL")
    if re.fullmatch(r"-?(0[xX][0-9a-fA-F]+|\d+)", s):
        return Lin(Poly.const(int(s, 0)))
    return ex.Const(float(s.rstrip("fF")))


def _short(v: Any) -> str:
    if isinstance(v, ex.Expr) and not isinstance(v, Read):
        return ex.describe(v) if not any(isinstance(n, Read) for n in ex.walk(v)) else "a load"
    if isinstance(v, Read):
        return f"a load of {v.ptr}"
    if isinstance(v, Lin):
        return v.poly.text()
    return type(v).__name__


