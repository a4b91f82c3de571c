"""Lifting a stencil program from a kernel's CUDA source (docs/stencil-programs.md).

:func:`lift_source` parses the source (tree-sitter; ``#define`` macros expanded by the host's
``cpp`` when there are any) and executes the kernel's body symbolically for one thread: indices
become polynomials over the thread's global indices and the integer parameters, loads become
reads of buffers, stores and ``atomicAdd`` calls are recorded with the guard under which they
happen (:mod:`.lift_symbolic`). :mod:`.lift_regions` then turns them into a
:class:`~kernforge.stencil.program.StencilProgram`. Anything outside that shape is refused with
the reason: shared memory, barriers, loops whose bounds are not constants (unless the loop is
itself a grid axis), loop-carried values, calls other than ``__ldg``/``fma``, conditional
indices, data-dependent branches, other atomics, stores away from the thread's point.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

from .. import syntax
from ..core import KernelSource
from ..stencil.program import expr as ex
from .lift_regions import Lifted, NotLifted, Store, build
from .lift_symbolic import FALSE, TRUE, Lin, Poly, Pred, Read, Symbols, Unliftable, normalize

FLOAT_TYPES = {"float": "fp32", "double": "fp64", "half": "fp16", "__half": "fp16"}
INT_TYPES = {"int", "unsigned", "long", "short", "char", "bool", "size_t", "int32_t",
             "uint32_t", "int64_t", "uint64_t", "unsigned int", "long long", "ptrdiff_t"}
MAX_UNROLL = 64
_BUILTIN = {"threadIdx": "tid", "blockIdx": "bid", "blockDim": "bdim"}
_CMP = ("<", "<=", ">", ">=", "==", "!=")
_FMA = ("fma", "fmaf", "__fmaf_rn", "__fma_rn")
_ARITH = {"__fadd_rn": "+", "__dadd_rn": "+", "__fsub_rn": "-", "__dsub_rn": "-",
          "__fmul_rn": "*", "__dmul_rn": "*"}


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


def lift_source(source: str | KernelSource, kernel: str | None = None, *,
                precision: str | None = None) -> Lifted | NotLifted:
    """The program of ``kernel`` in ``source`` (a :class:`KernelSource` names its entry), or
    why it is not lifted. ``precision``: the element type where the source leaves it open
    (a template parameter)."""
    if isinstance(source, KernelSource):
        source, kernel = source.code, kernel or source.entry
    if kernel is None:
        return NotLifted("no kernel name given")
    code = _preprocess(source)
    _data, root = syntax.parse(code, "cuda")
    fn = None
    constants: dict[str, bool] = {}  # __constant__ name -> is an array
    typedefs: dict[str, str] = {}
    for node in root.children:
        t = syntax.text(node)
        if node.type == "function_definition" and _name(node) == kernel:
            fn = node
        elif node.type == "declaration" and "__constant__" in t:
            for d in node.children_by_field_name("declarator"):
                ident = _ident(d)
                constants[ident] = "[" in syntax.text(d).split("=")[0]
        elif node.type == "type_definition":
            m = re.match(r"typedef\s+([\w\s]+?)\s+(\w+)\s*;", t)
            if m:
                typedefs[m.group(2)] = m.group(1).strip()
    if fn is None:
        return NotLifted(f"no function {kernel!r} in the source")
    if "__global__" not in syntax.text(fn).split("(")[0]:
        return NotLifted(f"{kernel!r} is not a __global__ function")
    try:
        walker = _Walker(constants, typedefs, precision)
        walker.parameters(fn)
        walker.block(fn.child_by_field_name("body"))
        return build(walker.stores, walker.params, walker.syms, walker.precision())
    except Unliftable as exc:
        return NotLifted(str(exc))


def _preprocess(source: str) -> str:
    if "#define" not in source:
        return source
    cpp = shutil.which("cpp")
    if cpp is None:
        return source
    body = "\n".join(line for line in source.splitlines()
                     if not line.lstrip().startswith("#include"))
    try:
        proc = subprocess.run([cpp, "-P", "-undef", "-nostdinc", "-w"], input=body,
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return source
    return proc.stdout if proc.returncode == 0 else source


def _name(fn: Any) -> str | None:
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    if d is None:
        return None
    n = d.child_by_field_name("declarator")
    return syntax.text(n) if n is not None else None


def _ident(d: Any) -> str:
    for n in syntax.walk(d):
        if n.type == "identifier":
            return syntax.text(n)
    raise Unliftable(f"no name in declarator {syntax.text(d)!r}")


class _Walker:
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
        raise Unliftable(f"element type {t!r} is not a float, double, half or integer type "
                         "(a template parameter needs precision=)")

    def parameters(self, fn: Any) -> None:
        d = fn.child_by_field_name("declarator")
        while d.type != "function_declarator":
            d = d.child_by_field_name("declarator")
        plist = [c for c in d.child_by_field_name("parameters").children
                 if c.type == "parameter_declaration"]
        for i, p in enumerate(plist):
            decl = p.child_by_field_name("declarator")
            name = _ident(decl)
            kind = self._scalar_type(syntax.text(p.child_by_field_name("type")))
            if "*" in syntax.text(decl) or "[" in syntax.text(decl):
                if kind == "int":
                    self.env[name] = Poison(f"{name} is an integer buffer")
                    self.params[name] = (i, "ptr:int")
                    continue
                self.env[name] = Ptr(name, i, Lin(Poly()), kind)
                self.params[name] = (i, f"ptr:{kind}")
            elif kind == "int":
                self.env[name] = Lin(Poly.sym(f"${name}"))
                self.params[name] = (i, "int")
            else:
                self.env[name] = ex.Param(i, name)
                self.params[name] = (i, kind)

    # --- statements ----------------------------------------------------------------------
    def block(self, node: Any) -> None:
        for c in node.named_children:
            self.stmt(c)

    def stmt(self, n: Any) -> None:
        t = n.type
        if t == "comment":
            return
        if t == "compound_statement":
            self.block(n)
        elif t == "declaration":
            self.declaration(n)
        elif t == "expression_statement":
            if n.named_children:
                self.effect(n.named_children[0])
        elif t == "if_statement":
            self.if_(n)
        elif t == "for_statement":
            self.for_(n)
        elif t == "return_statement":
            self.live = FALSE
        else:
            raise Unliftable(f"a {t.replace('_', ' ')} ({syntax.text(n)[:40]!r})")

    def declaration(self, n: Any) -> None:
        text = syntax.text(n)
        if "__shared__" in text:
            raise Unliftable("shared memory (a tile the threads share): lifted from probing, "
                             "not from source")
        kind = self._scalar_type(syntax.text(n.child_by_field_name("type")))
        for d in n.children_by_field_name("declarator"):
            if d.type == "array_declarator" or (d.type == "init_declarator" and
                                                d.child_by_field_name("declarator").type
                                                == "array_declarator"):
                raise Unliftable(f"a local array ({syntax.text(d)[:40]!r})")
            name = _ident(d)
            if d.type != "init_declarator":
                self.env[name] = Poison(f"{name} is used before it is set")
                continue
            v = self.value(d.child_by_field_name("value"))
            self.env[name] = self._as(v, kind) if not isinstance(v, Ptr | Pred) else v

    def _as(self, v: Any, kind: str) -> Any:
        if kind == "int" and isinstance(v, ex.Expr):
            raise Unliftable("a floating-point value converted to an integer")
        if kind != "int" and isinstance(v, Lin):
            return self.to_float(v)
        return v

    def effect(self, n: Any) -> None:
        if n.type == "assignment_expression":
            self.assign(n)
        elif n.type == "update_expression":
            name = syntax.text(n.child_by_field_name("argument"))
            step = 1 if "++" in syntax.text(n) else -1
            self.env[name] = self.value_of(name) + Lin(Poly.const(step))
        elif n.type == "call_expression":
            fname = syntax.text(n.child_by_field_name("function"))
            args = n.child_by_field_name("arguments").named_children
            if fname == "atomicAdd" and len(args) == 2:
                target = self.value(args[0])
                if not isinstance(target, Ptr):
                    raise Unliftable("atomicAdd on something that is no buffer")
                self.stores.append(Store(target.name, target.param, target.offset,
                                         self.to_expr(self.value(args[1])), self.live, True))
                self.precisions.add(target.precision)
                return
            if fname.startswith(("__syncthreads", "__syncwarp")):
                raise Unliftable(f"a barrier ({fname}): threads exchange values")
            raise Unliftable(f"a call to {fname} as a statement")
        else:
            raise Unliftable(f"the statement {syntax.text(n)[:40]!r}")

    def assign(self, n: Any) -> None:
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        op = syntax.text(n.child_by_field_name("operator"))
        v = self.value(right)
        if left.type == "subscript_expression" or left.type == "pointer_expression":
            target = self.address(left)
            if op != "=":
                v = self._arith(op[0], Read(target.name, target.param, target.offset), v)
            self.stores.append(Store(target.name, target.param, target.offset,
                                     self.to_expr(v), self.live, False))
            self.stored[(target.name, normalize(target.offset.poly))] = (self.live,
                                                                         self.to_expr(v))
            self.precisions.add(target.precision)
            return
        if left.type != "identifier":
            raise Unliftable(f"an assignment to {syntax.text(left)[:30]!r}")
        name = syntax.text(left)
        if op != "=":
            v = self._arith(op[0], self.value_of(name), v)
        old = self.env.get(name)
        self.env[name] = self.to_float(v) if isinstance(old, ex.Expr) and isinstance(v, Lin) \
            else v

    def if_(self, n: Any) -> None:
        c = self.cond(n.child_by_field_name("condition"))
        env0, live0 = dict(self.env), self.live
        self.live = live0 & c
        self.stmt(n.child_by_field_name("consequence"))
        env_t, live_t = self.env, self.live
        self.env, self.live = dict(env0), live0 & ~c
        alt = n.child_by_field_name("alternative")
        if alt is not None:
            self.stmt(alt.named_children[0] if alt.type == "else_clause" else alt)
        env_e, live_e = self.env, self.live
        self.live = live_t | live_e
        self.env = {k: self.merge(c, env_t[k], env_e[k]) if env_t[k] is not env_e[k]
                    else env_t[k] for k in env_t if k in env_e}

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
        for x, y, g in ((a, b, c), (b, a, ~c)):
            if isinstance(x, Read) and isinstance(y, ex.Const | Lin) and \
                    self.to_expr(y) == ex.Const(0.0):
                return Read(x.ptr, x.param, x.index, x.guard & g)
        return Poison("a value that depends on a condition other than a bound check "
                      f"({_short(a)} or {_short(b)})")

    def for_(self, n: Any) -> None:
        init, cond = n.child_by_field_name("initializer"), n.child_by_field_name("condition")
        upd = n.child_by_field_name("update")
        if init is None or cond is None or upd is None:
            raise Unliftable("a loop without initializer, condition or update")
        if init.type == "declaration":
            self.declaration(init)
            var = _ident(init.child_by_field_name("declarator"))
        else:
            self.effect(init)
            var = syntax.text(init.child_by_field_name("left"))
        ut = syntax.text(upd).replace(" ", "")
        step = {f"{var}++": 1, f"++{var}": 1, f"{var}+=1": 1, f"{var}--": -1, f"--{var}": -1,
                f"{var}-=1": -1}.get(ut)
        start = self.value_of(var)
        if step is None:
            raise Unliftable(f"a loop that steps by {ut!r}")
        if cond.type != "binary_expression" or syntax.text(cond.child_by_field_name("left")) \
                != var:
            raise Unliftable(f"a loop whose condition {syntax.text(cond)!r} is not a bound "
                             f"on {var}")
        op = syntax.text(cond.child_by_field_name("operator"))
        bound = self.value(cond.child_by_field_name("right"))
        a, b = start.poly.constant() if isinstance(start, Lin) else None, \
            bound.poly.constant() if isinstance(bound, Lin) else None
        body = n.child_by_field_name("body")
        if a is not None and b is not None:
            stop = {"<": b, "<=": b + 1, ">": b, ">=": b - 1, "!=": b}.get(op)
            if stop is None:
                raise Unliftable(f"a loop condition {op}")
            values = list(range(a, stop, step))
            if len(values) > MAX_UNROLL:
                raise Unliftable(f"a loop of {len(values)} iterations over taps")
            for v in values:
                self.env[var] = Lin(Poly.const(v))
                self.stmt(body)
            return
        if step != 1 or op not in ("<", "<=") or not isinstance(start, Lin) \
                or not isinstance(bound, Lin):
            raise Unliftable(f"a loop with bounds that depend on data or parameters "
                             f"({syntax.text(n)[:50]!r})")
        # a loop that walks a grid axis: each iteration is a point, like a thread
        self.loops += 1
        sym = Lin(Poly.sym(f"{var}@{self.loops}"))
        before, live0 = dict(self.env), self.live
        self.env[var] = sym
        self.live = live0 & Pred(">=", sym.poly, start.poly) & Pred(op, sym.poly, bound.poly)
        self.stmt(body)
        changed = [k for k in before if k != var and self.env.get(k) is not before[k]]
        if changed:
            raise Unliftable(f"a loop that carries {', '.join(changed)} from one iteration "
                             "to the next (registers reused along the loop)")
        self.env, self.live = before, live0

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
            if base in _BUILTIN and f in "xyz":
                return Lin(Poly.sym(f"{_BUILTIN[base]}.{f}"))
            raise Unliftable(f"{base}.{f} (gridDim: a grid-stride loop?)" if base == "gridDim"
                             else f"the member access {base}.{f}")
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
            return self._arith(op, self.value(n.child_by_field_name("left")),
                               self.value(n.child_by_field_name("right")))
        if t in ("subscript_expression", "pointer_expression"):
            if t == "pointer_expression" and syntax.text(n).startswith("&"):
                return self.address(n.child_by_field_name("argument"))
            if t == "subscript_expression":
                arr = syntax.text(n.child_by_field_name("argument"))
                if arr in self.constants and arr not in self.env:
                    k = self.index(n).poly.constant()
                    if k is None:
                        raise Unliftable(f"the __constant__ array {arr} read at a varying index")
                    return ex.ConstMem(arr, k)
            p = self.address(n)
            self.precisions.add(p.precision)
            return self.load(p)
        if t == "conditional_expression":
            c = self.cond(n.child_by_field_name("condition"))
            a = self.value(n.child_by_field_name("consequence"))
            b = self.value(n.child_by_field_name("alternative"))
            if isinstance(a, Lin) and isinstance(b, Lin) and a != b:
                raise Unliftable(f"a conditional index ({syntax.text(n)[:50]!r}): a clamped "
                                 "or mirrored boundary")
            v = self.merge(c, a, b)
            if isinstance(v, Poison):
                raise Unliftable(v.why)
            return v
        if t == "call_expression":
            return self.call(n)
        raise Unliftable(f"the expression {syntax.text(n)[:40]!r} ({t.replace('_', ' ')})")

    def call(self, n: Any) -> Any:
        fname = syntax.text(n.child_by_field_name("function"))
        args = [self.value(a) for a in n.child_by_field_name("arguments").named_children]
        if fname == "__ldg" and len(args) == 1 and isinstance(args[0], Ptr):
            return self.load(args[0])
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
        return ex.Bin(op, x, y)

    def _int(self, op: str, a: Lin, b: Lin) -> Lin:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return Lin(normalize(a.poly * b.poly), a.wraps | b.wraps)
        ca, cb = a.poly.constant(), b.poly.constant()
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
    if re.fullmatch(r"0[xX][0-9a-fA-F]+|\d+", s):
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


