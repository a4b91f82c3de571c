"""The ``zmarch`` rewrite (CUDA): thread coarsening along z with a register queue.

It applies to a kernel whose z index is ``K = blockIdx.z * blockDim.z + threadIdx.z`` and whose
flat index ``C`` is declared once (after ``K``, at the top level of the body) as a sum with one
term ``K * S``, where ``S`` and every other name in ``C`` stay the same for all ``K`` (parameters,
names declared before ``K``, macros, or locals declared from those and never written). Every
statement after ``K`` then runs in an unrolled loop over ``KF_ZC`` consecutive ``K`` (a macro, 1
unless defined; the tuner's ``launch.coarsen_z`` sets it, divides the launch grid's z by it and
defines ``KF_ZN``, the z extent of the launch before, beyond which the loop stops), and
``return`` becomes ``continue``.

Reads ``X[C - S]``, ``X[C]``, ``X[C + S]`` through ``const ... __restrict__`` pointers go through a
queue of registers with validity flags: each read site loads as before unless the same element
was loaded by an earlier iteration of the thread (``X[C + S]`` at ``K`` is ``X[C]`` at ``K + 1`` and
``X[C - S]`` at ``K + 2``), in which case the register is used. So the rewrite reads no element
the original kernel would not read, and a z column is read about once instead of three times
where every point reads its neighbours.

Not applied (None) when the body uses the z built-ins other than in ``K``, calls a function or a
function-like macro of the source, has loops, lambdas, barriers, shared memory, warp or
cooperative-group operations, atomics, ``goto`` or ``asm``, redeclares ``K``, ``C``, ``S`` or a
queued pointer, takes references or casts of them, or writes them; or when a macro of the source
hides control flow.
"""

from __future__ import annotations

import re
from typing import Any

from .syntax import _edit, _functions, _parse, _pointer_params, _text, _walk, _written

Node = Any
_ZIDX = re.compile(r"^\(?\s*(?:\([\w ]+\)\s*)?blockIdx\.z\s*\)?\s*\*\s*blockDim\.z\s*\+\s*"
                   r"threadIdx\.z$|^threadIdx\.z\s*\+\s*(?:\([\w ]+\)\s*)?blockIdx\.z\s*\*\s*"
                   r"blockDim\.z$")
_REFUSE = re.compile(r"__syncthreads|__shared__|\bgoto\b|\bKF_Z[CN]\b|\bkf_\w|__shfl|__ballot|"
                     r"__any_sync|__all_sync|__syncwarp|__activemask|__match_|__reduce_|"
                     r"cooperative_groups|\bcg::|\bgrid_group\b|\batomic|\basm\b|\bstatic\b")
_ZBUILTIN = re.compile(r"\b(?:threadIdx|blockIdx|blockDim|gridDim)\s*\.\s*z\b")
_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(\()?(.*)$", re.MULTILINE)
_CONTROL = re.compile(r"\b(?:return|goto|break|continue|for|while|do|asm)\b|__syncthreads|"
                      r"threadIdx|blockIdx|blockDim|gridDim")
HEADER = ("#ifndef KF_ZC\n#define KF_ZC 1  // z points per thread (kernforge zmarch; the launch "
          "grid's z is divided by it)\n#endif\n#ifndef KF_ZN\n#define KF_ZN 2147483647  // the "
          "launch's z extent before (set with KF_ZC)\n#endif\n")
_LOOPS = ("for_statement", "while_statement", "do_statement", "lambda_expression")


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


def _declared(node: Node) -> list[str]:
    """The names a ``declaration`` node declares."""
    names = []
    for d in node.children_by_field_name("declarator"):
        while d is not None and d.type not in ("identifier",):
            d = d.child_by_field_name("declarator") if d.type != "identifier" else d
        if d is not None:
            names.append(_text(d))
    return names


def _names(node: Node) -> set[str]:
    return {_text(d) for d in _walk(node) if d.type == "identifier"}


def _invariant(names: set[str], k: str, before: set[str], local: dict[str, Node],
               written: set[str], seen: frozenset[str] = frozenset()) -> bool:
    """True when every name is the same for all ``K``: not ``K``, never written, and either not
    a local of the loop region (a parameter, a name declared before ``K``, a macro) or a local
    declared once from such names."""
    for name in names:
        if name == k or name in written:
            return False
        if name in before or name not in local:
            continue
        if name in seen:
            return False
        value = local[name]
        if value is None or not _invariant(_names(value), k, before, local, written,
                                           seen | {name}):
            return False
    return True


def _macros_hide_control(code: str, body: Node) -> bool:
    """A macro of the source that hides control flow or the z built-ins, or a function-like
    macro the body uses (its expansion is not parsed)."""
    used = _names(body)
    for m in _MACRO.finditer(code):
        name, is_function, text = m.group(1), m.group(2), m.group(3)
        if name in used and (is_function or _CONTROL.search(text)):
            return True
    return False


def _queued(fn: Node, stmts: list[Node], c: str, s: str) -> dict[str, tuple[str, list[Node]]]:
    """Per const __restrict__ pointer read as ``X[C - S]``/``X[C]``/``X[C + S]``: its element
    type and those subscripts (only pointers read at two of them at least)."""
    written = _written(fn.child_by_field_name("body"))
    out: dict[str, tuple[str, list[Node]]] = {}
    for p, name in _pointer_params(fn):
        text = _text(p)
        if name in written or "const" not in text.split("*")[0] or "__restrict__" not in text:
            continue
        elem = " ".join(w for w in re.findall(r"\w+", text.split("*")[0])
                        if w not in ("const", "__restrict__"))
        hits = [n for st in stmts for n in _walk(st) if n.type == "subscript_expression"
                and _text(n.child_by_field_name("argument")) == name
                and (i := _index(n)) is not None and _form(_text(i), c, s) is not None]
        if len({_form(_text(_index(h)), c, s) for h in hits}) >= 2:  # type: ignore[arg-type]
            out[name] = (elem, hits)
    return out


def _form(index: str, c: str, s: str) -> str | None:
    return {c: "0", f"{c} + {s}": "p", f"{s} + {c}": "p", f"{c} - {s}": "m"}.get(_norm(index))


def _refused(code: str, body: Node, fn_names: set[str], protected: set[str]) -> bool:
    """Constructs the rewrite does not handle (see the module doc)."""
    if any(n.type in _LOOPS or n.type == "reference_declarator" for n in _walk(body)):
        return True
    for n in _walk(body):
        f = n.child_by_field_name("function") if n.type == "call_expression" else None
        calls = f is not None and _text(f) in fn_names
        casts = n.type == "cast_expression" and \
            _text(_unparen(n.child_by_field_name("value"))) in protected
        addresses = n.type == "pointer_expression" and _text(n).lstrip().startswith("&") \
            and bool(_names(n) & protected)
        if calls or casts or addresses:
            return True
    return _macros_hide_control(code, body)


def _rewrite_fn(code: str, data: bytes, fn: Node, fn_names: set[str]) -> \
        list[tuple[int, int, str]] | None:
    body = fn.child_by_field_name("body")
    head = data[fn.start_byte:body.start_byte].decode()
    if "__global__" not in head or _REFUSE.search(_text(body)):
        return None
    stmts = [c for c in body.named_children if c.type != "comment"]
    kpos = next((i for i, st in enumerate(stmts) if (si := _single_init(st)) is not None
                 and _ZIDX.match(_norm(_text(si[1])))), None)
    if kpos is None:
        return None
    k, kval = _single_init(stmts[kpos])  # type: ignore[misc]
    if len(_ZBUILTIN.findall(_text(body))) != len(_ZBUILTIN.findall(_text(kval))):
        return None  # the z built-ins mean something else once a thread runs several K
    rest = stmts[kpos + 1:]
    cpos = next((i for i, st in enumerate(rest) if (si := _single_init(st)) is not None
                 and _mentions(si[1], k)), None)
    if cpos is None:
        return None
    c, cval = _single_init(rest[cpos])  # type: ignore[misc]
    s = _stride(cval, k)
    if s is None:
        return None
    written = _written(body)
    if k in written or c in written:
        return None
    before = {p for _, p in _pointer_params(fn)} | {
        n for st in stmts[:kpos] if st.type == "declaration" for n in _declared(st)}
    params = fn.child_by_field_name("declarator")
    before |= _names(params) if params is not None else set()
    decls = [d for d in _walk(body) if d.type == "declaration"]
    counts: dict[str, int] = {}
    for d in decls:
        for name in _declared(d):
            counts[name] = counts.get(name, 0) + 1
    local: dict[str, Node] = {}
    for st in rest:
        if st.type == "declaration":
            for d in st.named_children:
                if d.type == "init_declarator":
                    name = d.child_by_field_name("declarator")
                    if name is not None and name.type == "identifier":
                        local[_text(name)] = d.child_by_field_name("value")
    top = (body.start_byte, body.end_byte)
    nested = {n for d in decls if (d.parent.start_byte, d.parent.end_byte) != top
              for n in _declared(d)}
    local.update({n: None for n in nested})  # not top-level: never invariant
    queues = _queued(fn, rest[cpos + 1:], c, s)
    protected = {k, c, s, *queues}
    if not queues or counts.get(k) != 1 or counts.get(c) != 1 or counts.get(s, 0) > 1 or \
            any(counts.get(x) for x in queues) or \
            not _invariant(_names(cval) - {k}, k, before, local, written) or \
            _refused(code, body, fn_names, protected):
        return None
    kdecl = next(d for d in stmts[kpos].named_children if d.type == "init_declarator")
    ktype = data[stmts[kpos].start_byte:kdecl.start_byte].decode().strip()
    start, end = stmts[kpos].end_byte, rest[-1].end_byte
    sub: list[tuple[int, int, str]] = []
    for st in rest:
        for n in _walk(st):
            if n.type == "return_statement":
                sub.append((n.start_byte - start, n.end_byte - start, "continue;"))
    for x, (_, hits) in queues.items():
        for h in hits:
            f = _form(_text(_index(h)), c, s)  # type: ignore[arg-type]
            r, v = f"kf_{x}_{f}", f"kf_{x}_{f}v"
            sub.append((h.start_byte - start, h.end_byte - start,
                        f"({v} ? {r} : ({v} = true, {r} = {_text(h)}))"))
    inner = _edit(data[start:end], sub)
    regs = "".join(f"\n    {t} kf_{x}_m{{}}, kf_{x}_0{{}}, kf_{x}_p{{}};"
                   f"\n    bool kf_{x}_mv = false, kf_{x}_0v = false, kf_{x}_pv = false;"
                   for x, (t, _) in queues.items())
    shift = "".join(f" kf_{x}_m = kf_{x}_0; kf_{x}_mv = kf_{x}_0v; kf_{x}_0 = kf_{x}_p;"
                    f" kf_{x}_0v = kf_{x}_pv; kf_{x}_pv = false;" for x in queues)
    new = (f"\n    const auto kf_z0 = ({_text(kval)}) * KF_ZC;{regs}\n#pragma unroll\n"
           f"    for (int kf_t = 0; kf_t < KF_ZC; ++kf_t) {{\n    {ktype} {k} = kf_z0 + kf_t;"
           f"\n    if (kf_z0 + kf_t >= KF_ZN) break;  // no such thread in the launch before"
           f"\n    if (kf_t) {{{shift} }}  // the column moves up one{inner}\n    }}")
    return [(stmts[kpos].start_byte, end, new.lstrip())]


def zmarch(code: str, language: str) -> str | None:
    if language != "cuda" or "KF_ZC" in code:
        return None
    data, root = _parse(code, language)
    functions = _functions(root)
    names = set()
    for fn in functions:
        decl = fn.child_by_field_name("declarator")
        while decl is not None and decl.type != "function_declarator":
            decl = decl.child_by_field_name("declarator")
        ident = decl.child_by_field_name("declarator") if decl is not None else None
        if ident is not None:
            names.add(_text(ident).split("<")[0].split("::")[-1])
    edits: list[tuple[int, int, str]] = []
    for fn in functions:
        found = _rewrite_fn(code, data, fn, names)
        if found:
            edits += found
    return HEADER + _edit(data, edits) if edits else None
