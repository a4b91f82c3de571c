"""Lifting a stencil program from a kernel's CUDA source (docs/stencil-programs.md).

:func:`lift_source` parses the source (tree-sitter; ``#define`` macros and the build's ``-D``
defines expanded by the host's ``cpp``) and executes the kernel's body symbolically for one
thread: indices become polynomials over the thread's global indices and the integer
parameters, loads become reads of buffers, stores and ``atomicAdd`` calls are recorded with the
guard under which they happen (:mod:`.lift_symbolic`); a shared-memory tile is read as the
window of the buffer its threads loaded (:mod:`.lift_tiles`). :mod:`.lift_regions` then turns
them into a :class:`~kernforge.stencil.program.StencilProgram`. Anything outside that shape is
refused with the reason: tiles that are no window, other barriers, loops whose bounds are not
constants (unless the loop is itself a grid axis, or a grid-stride loop), loop-carried values,
calls other than ``__ldg``/``fma``, conditional indices, data-dependent branches, other
atomics, stores away from the thread's point.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from .. import syntax
from ..core import ConfigError, KernelSource
from ..stencil.program import expr as ex
from .lift_exprs import FLOAT_TYPES, INT_TYPES, MAX_UNROLL, Exprs, Poison, Ptr
from .lift_includes import function_name, top_level
from .lift_regions import Lifted, NotLifted, Store, build
from .lift_symbolic import FALSE, Lin, Poly, Pred, Read, Unliftable, normalize
from .lift_tiles import Tiles


def lift_source(source: str | KernelSource | Any, kernel: str | None = None, *,
                precision: str | None = None, defines: Sequence[str] = ()
                ) -> Lifted | NotLifted:
    """The program of ``kernel`` in ``source``, or why it is not lifted. ``source``: CUDA code,
    a :class:`KernelSource` (it names its entry) or a ``kernforge.Kernel`` (its source);
    ``precision``: the element type where the source leaves it open (a template parameter);
    ``defines``: the ``-D`` options (``NAME`` or ``NAME=VALUE``) the program is built with."""
    inner = getattr(source, "source", None)
    if isinstance(inner, KernelSource):
        source = inner
    if isinstance(source, KernelSource):
        kernel = kernel or source.entry
        source = source.code
    if kernel is None:
        return NotLifted("no kernel name given")
    code = _unparenthesize(_preprocess(source, defines))
    _data, root = syntax.parse(code, "cuda")
    fn = None
    constants: dict[str, bool] = {}  # __constant__ name -> is an array
    typedefs: dict[str, str] = {}
    globals_: list[Any] = []
    for node in top_level(root):
        t = syntax.text(node)
        if node.type == "function_definition" and function_name(node) == kernel:
            fn = node
        elif node.type == "declaration" and "__constant__" in t:
            for d in node.children_by_field_name("declarator"):
                ident = _ident(d)
                constants[ident] = "[" in syntax.text(d).split("=")[0]
        elif node.type == "declaration" and re.match(r"(static\s+)?const(expr)?\b", t) \
                and "(" not in t:
            globals_.append(node)  # const Real mix_param = 0.9;
        elif node.type == "type_definition":
            m = re.match(r"typedef\s+([\w\s]+?)\s+(\w+)\s*;", t)
            if m:
                typedefs[m.group(2)] = m.group(1).strip()
    for k, v in list(typedefs.items()):  # typedef double real8; typedef real8 Real_t;
        for _ in range(8):
            v = typedefs.get(v, v)
        typedefs[k] = v
    if fn is None:
        return NotLifted(f"no function {kernel!r} in the source")
    if "__global__" not in syntax.text(fn).split("(")[0]:
        return NotLifted(f"{kernel!r} is not a __global__ function")
    try:
        walker = _Walker(constants, typedefs, precision)
        for g in globals_:  # a constant scalar of the file, where the kernel reads it
            try:
                walker.declaration(g)
            except Unliftable:
                continue
        walker.parameters(fn)
        walker.block(fn.child_by_field_name("body"))
        if "gdim." in repr(walker.stores):
            raise Unliftable("gridDim in an index or a guard (the grid's size is a launch "
                             "detail, not part of the program)")
        return build(walker.stores, walker.params, walker.syms, walker.precision())
    except Unliftable as exc:
        return NotLifted(str(exc))
    except ConfigError as exc:  # a formula the program model does not hold
        return NotLifted(f"the program model refuses it: {exc.message}")


def _preprocess(source: str, defines: Sequence[str] = ()) -> str:
    if "#define" not in source and not defines:
        return source
    cpp = shutil.which("cpp")
    if cpp is None:
        return source
    body = "\n".join(line for line in source.splitlines()
                     if not line.lstrip().startswith("#include"))
    try:
        proc = subprocess.run([cpp, "-P", "-undef", "-nostdinc", "-w",
                               *(f"-D{d}" for d in defines)], input=body,
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return source
    return proc.stdout if proc.returncode == 0 else source


_AMBIGUOUS = re.compile(r"\(\s*([A-Za-z_]\w*)\s*\)(?=\s*[-+*&])")


def _unparenthesize(code: str) -> str:
    """``(j)*N``, ``(i) - 1``, as macros expand, without the parentheses C would read as a
    cast to ``j``; a name that may be a type keeps them (a cast to an unknown name is refused
    later, never read as a product)."""
    types = set(FLOAT_TYPES) | set(INT_TYPES) | {"void", "signed", "auto", "char", "bool"}
    types |= set(re.findall(r"\b(?:typename|class|struct|union|enum)\s+(\w+)", code))
    types |= set(re.findall(r"\btypedef\b[^;]*?(\w+)\s*;", code))
    return _AMBIGUOUS.sub(lambda m: m.group(0) if m.group(1) in types else m.group(1), code)


def _ident(d: Any) -> str:
    for n in syntax.walk(d):
        if n.type == "identifier":
            return syntax.text(n)
    raise Unliftable(f"no name in declarator {syntax.text(d)!r}")


class _Walker(Tiles, Exprs):
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

    def value(self, n: Any) -> Any:
        tile = self.tile_read(n)
        if tile is not None:
            return tile
        if n.type == "call_expression":  # Real_t(0.5), (llint)(i): a cast written as a call
            ty = syntax.text(n.child_by_field_name("function")).strip("() \t")
            args = n.child_by_field_name("arguments").named_children
            if len(args) == 1 and (ty in FLOAT_TYPES or ty in INT_TYPES or ty in self.typedefs):
                kind = self._scalar_type(ty)
                v = self.value(args[0])
                return self._as(v, kind) if not isinstance(v, Ptr | Pred) else v
        return super().value(n)

    # --- statements ----------------------------------------------------------------------
    def block(self, node: Any) -> None:
        for c in node.named_children:
            self.stmt(c)

    def stmt(self, n: Any) -> None:
        t = n.type
        if t == "comment" or (t == "preproc_call" and syntax.text(n).lstrip("# \t")
                              .startswith("pragma")):
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
            self.tile_declare(n)
            return
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
            if fname == "__syncthreads" and getattr(self, "tiles", None):
                self.barriers += 1
                return
            if fname.startswith(("__syncthreads", "__syncwarp")):
                raise Unliftable(f"a barrier ({fname}): threads exchange values")
            raise Unliftable(f"a call to {fname} as a statement")
        else:
            raise Unliftable(f"the statement {syntax.text(n)[:40]!r}")

    def assign(self, n: Any) -> None:
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        if right.type == "assignment_expression":  # a = b = v: b first, then a = b
            self.assign(right)
            right = right.child_by_field_name("left")
        op = syntax.text(n.child_by_field_name("operator"))
        v = self.value(right)
        if self.tile_write(left, op, v):
            return
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
        # neither branch returned: the guard is the one before the if, not (c or not c)
        self.live = live0 if (live_t, live_e) == (live0 & c, live0 & ~c) else live_t | live_e
        self.env = {k: self.merge(c, env_t[k], env_e[k]) if env_t[k] is not env_e[k]
                    else env_t[k] for k in env_t if k in env_e}

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
        if self._grid_stride(var, cond, upd, n.child_by_field_name("body")):
            return
        ut = syntax.text(upd).replace(" ", "")
        step = {f"{var}++": 1, f"++{var}": 1, f"{var}+=1": 1, f"{var}--": -1, f"--{var}": -1,
                f"{var}-=1": -1}.get(ut)
        start = self.value_of(var)
        if step is None and re.fullmatch(rf"{var}(/=2|>>=1|={var}/2|={var}>>1)", ut):
            raise Unliftable(f"a tree reduction across threads (a loop that steps by {ut!r}): "
                             "sums over threads are not followed from source; probing the "
                             "kernel measures them")
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
        count = len(self.stores)
        self.stmt(body)
        if len(self.stores) == count:
            raise Unliftable(f"a loop over taps whose bounds depend on parameters or data "
                             f"({syntax.text(n).split(')')[0]})")
        changed = [k for k in before if k != var and self.env.get(k) is not before[k]]
        if changed:
            raise Unliftable(f"a loop that carries {', '.join(changed)} from one iteration "
                             "to the next (registers reused along the loop)")
        self.env, self.live = before, live0

    def _grid_stride(self, var: str, cond: Any, upd: Any, body: Any) -> bool:
        """``for (i = global index; i < n; i += blockDim.a * gridDim.a)``: every point once,
        as if the grid covered the domain; False for any other loop."""
        if upd.type != "assignment_expression" or \
                syntax.text(upd.child_by_field_name("operator")) != "+=" or \
                syntax.text(upd.child_by_field_name("left")) != var:
            return False
        stride, start = self.value(upd.child_by_field_name("right")), self.value_of(var)
        if not isinstance(stride, Lin) or not any(x.startswith("gdim.")
                                                  for x in stride.poly.symbols()):
            return False
        axis = next(x[-1] for x in stride.poly.symbols() if x.startswith("gdim."))
        own = Poly.sym(f"bid.{axis}") * Poly.sym(f"bdim.{axis}") + Poly.sym(f"tid.{axis}")
        op = syntax.text(cond.child_by_field_name("operator")) \
            if cond.type == "binary_expression" else ""
        bound = self.value(cond.child_by_field_name("right")) if op else None
        if normalize(stride.poly) != normalize(Poly.sym(f"bdim.{axis}") *
                                              Poly.sym(f"gdim.{axis}")) \
                or not isinstance(start, Lin) or (normalize(start.poly - own).symbols() &
                                                  {f"tid.{axis}", f"bid.{axis}"}) \
                or op not in ("<", "<=") or not isinstance(bound, Lin) \
                or syntax.text(cond.child_by_field_name("left")) != var:
            raise Unliftable(f"a grid-stride loop that is not over the thread's own points "
                             f"({syntax.text(cond)!r} by {syntax.text(upd)!r})")
        before, live0 = dict(self.env), self.live
        self.live = live0 & Pred(op, normalize(start.poly), normalize(bound.poly))
        self.stmt(body)
        changed = [k for k in before if k != var and self.env.get(k) is not before[k]]
        if changed:
            raise Unliftable(f"a grid-stride loop that carries {', '.join(changed)} from one "
                             "point to the next")
        self.env, self.live = before, live0
        return True
