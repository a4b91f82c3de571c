"""The ``zmarch`` rewrite (CUDA): thread coarsening along z with a register queue.

It applies to a kernel whose z index is ``K = blockIdx.z * blockDim.z + threadIdx.z``, whose
flat index ``C`` is declared (after ``K``, at the top level of the body) as a sum with the term
``K * S``, ``S`` a name the kernel never writes, and whose reads ``X[C - S]``, ``X[C]`` and
``X[C + S]`` go through ``const ... __restrict__`` pointers. Every statement after ``K`` then
runs in an unrolled loop over ``KF_ZC`` consecutive ``K`` (a macro, 1 unless defined: the
tuner's ``launch.coarsen_z`` sets it and divides the launch grid's z by it), ``return``
becomes ``continue``, and the three reads become a queue of registers: the value at ``K + 1``
loaded in one iteration is the value at ``K`` in the next and at ``K - 1`` in the one after,
so a z column is read once instead of three times.

The queue loads a neighbour only where the original kernel's own thread at that ``K`` would
read ``X[C]``: below the top (``K >= 1``) and where the z bound of the kernel's guard holds.
So the rule needs that guard: the statements between ``K`` and ``C`` may only return through
``if (A || B || ...) return;`` whose operands are ``K >= E`` / ``K > E`` (``E`` free of ``K``)
or free of ``K``; such a guard, once true, stays true for larger ``K`` (the loop may skip the
rest of the column). Loops, barriers, shared memory or ``goto`` in the body: not applied.
"""

from __future__ import annotations

import re
from typing import Any

from .syntax import _edit, _functions, _parse, _pointer_params, _text, _walk, _written

Node = Any
_ZIDX = re.compile(r"^\(?\s*(?:\([\w ]+\)\s*)?blockIdx\.z\s*\)?\s*\*\s*blockDim\.z\s*\+\s*"
                   r"threadIdx\.z$|^threadIdx\.z\s*\+\s*(?:\([\w ]+\)\s*)?blockIdx\.z\s*\*\s*"
                   r"blockDim\.z$")
_REFUSE = re.compile(r"__syncthreads|__shared__|\bgoto\b|\bKF_ZC\b|\bkf_[zt]\b|\bkf_z0\b")
HEADER = ("#ifndef KF_ZC\n#define KF_ZC 1  // z points per thread (kernforge zmarch; the launch "
          "grid's z is divided by it)\n#endif\n")


def _norm(text: str) -> str:
    return " ".join(text.split())


def _unparen(n: Node) -> Node:
    while n is not None and n.type in ("parenthesized_expression", "condition_clause"):
        inner = n.child_by_field_name("value") or (n.named_children[0] if n.named_children
                                                  else None)
        if inner is None:
            break
        n = inner
    return n


def _terms(n: Node) -> list[Node]:
    """The operands of a chain of ``+``."""
    n = _unparen(n)
    if n.type == "binary_expression" and _text(n.child_by_field_name("operator")) == "+":
        return _terms(n.child_by_field_name("left")) + _terms(n.child_by_field_name("right"))
    return [n]


def _is_name(n: Node, name: str) -> bool:
    n = _unparen(n)
    if n.type == "cast_expression":
        n = _unparen(n.child_by_field_name("value"))
    return n.type == "identifier" and _text(n) == name


def _mentions(n: Node, name: str) -> bool:
    return any(d.type == "identifier" and _text(d) == name for d in _walk(n))


def _index(n: Node) -> Node | None:
    """The index expression of ``X[E]`` (tree-sitter-cuda wraps it in an argument list)."""
    idx = n.child_by_field_name("index") or n.child_by_field_name("indices")
    if idx is not None and idx.type == "subscript_argument_list":
        idx = idx.named_children[0] if len(idx.named_children) == 1 else None
    return _unparen(idx) if idx is not None else None


def _stride(value: Node, k: str) -> str | None:
    """``S`` when ``value`` is a sum with exactly one term ``K * S`` (or ``S * K``) and no other
    mention of ``K``."""
    found = None
    for t in _terms(value):
        if not _mentions(t, k):
            continue
        if found is not None or t.type != "binary_expression" or \
                _text(t.child_by_field_name("operator")) != "*":
            return None
        a, b = t.child_by_field_name("left"), t.child_by_field_name("right")
        if _is_name(a, k) and _unparen(b).type == "identifier":
            found = _text(_unparen(b))
        elif _is_name(b, k) and _unparen(a).type == "identifier":
            found = _text(_unparen(a))
        else:
            return None
    return found


def _single_init(stmt: Node) -> tuple[str, Node] | None:
    """(name, value) of a declaration with exactly one declarator that has an initializer."""
    if stmt.type != "declaration":
        return None
    decls = [c for c in stmt.named_children if c.type == "init_declarator"]
    others = [c for c in stmt.children_by_field_name("declarator") if c.type != "init_declarator"]
    if len(decls) != 1 or others:
        return None
    d = decls[0]
    name = d.child_by_field_name("declarator")
    value = d.child_by_field_name("value")
    if name is None or name.type != "identifier" or value is None:
        return None
    return _text(name), value


def _upper_bounds(cond: Node, k: str) -> list[str] | None:
    """The operands of the guard ``cond`` (an ``||`` chain) that mention ``K``, each written as
    a bound on ``K`` (None when one is not ``K >= E`` / ``K > E`` / ``E <= K`` / ``E < K``)."""
    cond = _unparen(cond)
    if cond.type == "binary_expression" and _text(cond.child_by_field_name("operator")) == "||":
        left = _upper_bounds(cond.child_by_field_name("left"), k)
        right = _upper_bounds(cond.child_by_field_name("right"), k)
        return None if left is None or right is None else left + right
    if not _mentions(cond, k):
        return []
    if cond.type != "binary_expression":
        return None
    op = _text(cond.child_by_field_name("operator"))
    a, b = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    if op in (">=", ">") and _is_name(a, k) and not _mentions(b, k):
        return [f"(K_NEXT {op} ({_text(b)}))"]
    if op in ("<=", "<") and _is_name(b, k) and not _mentions(a, k):
        return [f"(({_text(a)}) {op} K_NEXT)"]
    return None


def _guard_bounds(stmts: list[Node], k: str) -> list[str] | None:
    """The z bounds of the guards among ``stmts`` (the statements between ``K`` and ``C``);
    None when one of them returns otherwise."""
    bounds: list[str] = []
    for s in stmts:
        if not any(d.type == "return_statement" for d in _walk(s)):
            continue
        cons = s.child_by_field_name("consequence") if s.type == "if_statement" else None
        body = cons
        if body is not None and body.type == "compound_statement":
            inner = [c for c in body.named_children if c.type != "comment"]
            body = inner[0] if len(inner) == 1 else None
        if body is None or body.type != "return_statement" or body.named_children \
                or s.child_by_field_name("alternative") is not None:
            return None
        found = _upper_bounds(s.child_by_field_name("condition"), k)
        if found is None:
            return None
        bounds += found
    return bounds


def _queued(fn: Node, stmts: list[Node], c: str, s: str) -> dict[str, tuple[str, list[Node]]]:
    """Per const __restrict__ pointer read as ``X[C - S]``/``X[C]``/``X[C + S]``: its element
    type and those subscripts (only pointers read at ``C`` and at ``C + S`` or ``C - S``)."""
    written = _written(fn.child_by_field_name("body"))
    forms = {c: "0", f"{c} + {s}": "p", f"{s} + {c}": "p", f"{c} - {s}": "m"}
    out: dict[str, tuple[str, list[Node]]] = {}
    for p, name in _pointer_params(fn):
        text = _text(p)
        if name in written or "const" not in text.split("*")[0] or "__restrict__" not in text:
            continue
        elem = " ".join(w for w in re.findall(r"\w+", text.split("*")[0])
                        if w not in ("const", "__restrict__"))
        hits = [n for st in stmts for n in _walk(st) if n.type == "subscript_expression"
                and _text(n.child_by_field_name("argument")) == name
                and (i := _index(n)) is not None and _norm(_text(i)) in forms]
        kinds = {forms[_norm(_text(_index(h)))] for h in hits}  # type: ignore[arg-type]
        if "0" in kinds and kinds & {"p", "m"}:
            out[name] = (elem, hits)
    return out


def _rewrite_fn(data: bytes, fn: Node) -> list[tuple[int, int, str]] | None:
    body = fn.child_by_field_name("body")
    head = data[fn.start_byte:body.start_byte].decode()
    if "__global__" not in head or _REFUSE.search(_text(body)):
        return None
    if any(n.type in ("for_statement", "while_statement", "do_statement")
           for n in _walk(body)):
        return None
    stmts = [c for c in body.named_children if c.type != "comment"]
    kpos = next((i for i, st in enumerate(stmts) if (si := _single_init(st)) is not None
                 and _ZIDX.match(_norm(_text(si[1])))), None)
    if kpos is None:
        return None
    k, kval = _single_init(stmts[kpos])  # type: ignore[misc]
    if k in _written(body):
        return None
    rest = stmts[kpos + 1:]
    cpos = next((i for i, st in enumerate(rest) if (si := _single_init(st)) is not None
                 and _mentions(si[1], k)), None)
    if cpos is None:
        return None
    c, cval = _single_init(rest[cpos])  # type: ignore[misc]
    s = _stride(cval, k)
    if s is None or s in _written(body) or c in _written(body):
        return None
    bounds = _guard_bounds(rest[:cpos], k)
    if not bounds:
        return None  # no z bound: where the column ends is unknown
    queues = _queued(fn, rest[cpos + 1:], c, s)
    if not queues:
        return None
    kdecl = next(d for d in stmts[kpos].named_children if d.type == "init_declarator")
    ktype = data[stmts[kpos].start_byte:kdecl.start_byte].decode().strip()
    nxt = "!(" + " || ".join(b.replace("K_NEXT", f"({k} + 1)") for b in bounds) + ")"
    # the loop body: every statement after K, returns -> continue, queued reads -> registers
    start, end = stmts[kpos].end_byte, rest[-1].end_byte
    sub: list[tuple[int, int, str]] = []
    for st in rest:
        for n in _walk(st):
            if n.type == "return_statement":
                sub.append((n.start_byte - start, n.end_byte - start, "continue;"))
    forms = {c: "0", f"{c} + {s}": "p", f"{s} + {c}": "p", f"{c} - {s}": "m"}
    for name, (_, hits) in queues.items():
        for h in hits:
            idx = _norm(_text(_index(h)))  # type: ignore[arg-type]
            sub.append((h.start_byte - start, h.end_byte - start, f"kf_{name}_{forms[idx]}"))
    update = "".join(
        f"\n        if (kf_t == 0) {{ kf_{x}_m = {k} >= 1 ? {x}[{c} - {s}] : kf_{x}_m; "
        f"kf_{x}_0 = {x}[{c}]; }}\n        else {{ kf_{x}_m = kf_{x}_0; kf_{x}_0 = kf_{x}_p; }}"
        f"\n        kf_{x}_p = {nxt} ? {x}[{c} + {s}] : kf_{x}_p;" for x in queues)
    cut = rest[cpos].end_byte - start
    sub.append((cut, cut, update))
    inner = _edit(data[start:end], sub)
    regs = "".join(f"\n    {t} kf_{x}_m{{}}, kf_{x}_0{{}}, kf_{x}_p{{}};"
                   for x, (t, _) in queues.items())
    new = (f"\n    const int kf_z0 = ({_text(kval)}) * KF_ZC;{regs}\n#pragma unroll\n"
           f"    for (int kf_t = 0; kf_t < KF_ZC; ++kf_t) {{\n    {ktype} {k} = kf_z0 + kf_t;"
           f"{inner}\n    }}")
    return [(stmts[kpos].start_byte, end, new.lstrip())]


def zmarch(code: str, language: str) -> str | None:
    if language != "cuda" or "KF_ZC" in code:
        return None
    data, root = _parse(code, language)
    edits: list[tuple[int, int, str]] = []
    for fn in _functions(root):
        found = _rewrite_fn(data, fn)
        if found:
            edits += found
    return HEADER + _edit(data, edits) if edits else None
