"""Rule-based source rewrites for C and CUDA kernels, on a real parser (tree-sitter).

Each rule returns the rewritten source, or ``None`` when it does not apply; a rule never
returns a half-edited source. The rules keep results bitwise identical:

- ``restrict_const``: ``const`` on pointer parameters the function never writes through, and
  ``__restrict__`` (CUDA) / ``restrict`` (C) on every pointer parameter;
- ``ldg`` (CUDA): reads through ``const T* __restrict__`` parameters of builtin scalar types
  (directly or through a ``typedef`` in the source, e.g. ``typedef float real_t;``) go through
  ``__ldg`` (the read-only data cache);
- ``unroll``: ``#pragma unroll 4`` (CUDA) / ``#pragma GCC unroll 4`` (C) on innermost ``for``
  loops (in C only those nested in another loop and not part of an OpenMP ``collapse`` nest);
- ``grid_stride`` (CUDA): ``i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) S;`` becomes
  a grid-stride loop, so the same kernel is correct with a smaller grid (thread coarsening when
  the launch grid is tuned down);
- ``zmarch`` (CUDA, :mod:`.zmarch`): a 3D kernel runs ``KF_ZC`` consecutive z indices per
  thread with its z-neighbour reads in a register queue (the tuner's ``launch.coarsen_z``);
- ``omp_simd`` (C): ``simd`` on an OpenMP loop with no inner loop whose reductions (if any) are
  ``max``/``min`` only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .syntax import (
    _base_name,
    _edit,
    _functions,
    _parse,
    _pointer_params,
    _text,
    _walk,
    _written,
)
from .zmarch import zmarch

Node = Any
LDG_TYPES = {"float", "double", "int", "unsigned", "unsigned int", "long long", "char",
             "short", "unsigned char", "unsigned short", "unsigned long long", "float2",
             "float4", "double2", "int2", "int4"}
_TYPEDEF = re.compile(r"\btypedef\s+([\w ]+?)\s+(\w+)\s*;")


def language_of(code: str) -> str:
    return "cuda" if re.search(r"__global__|__device__|threadIdx|blockIdx", code) else "c"


def restrict_const(code: str, language: str) -> str | None:
    data, root = _parse(code, language)
    kw = "__restrict__" if language == "cuda" else "restrict"
    edits: list[tuple[int, int, str]] = []
    for fn in _functions(root):
        written = _written(fn.child_by_field_name("body"))
        for p, name in _pointer_params(fn):
            text = _text(p)
            words = set(re.findall(r"[\w]+", text))
            new = text
            if name not in written and "const" not in words:
                new = "const " + new
            if not words & {"restrict", "__restrict__", "__restrict"}:
                new = re.sub(r"\*\s*(" + re.escape(name) + r")\s*$", f"* {kw} \\1", new)
            if new != text:
                edits.append((p.start_byte, p.end_byte, new))
    return _edit(data, edits) if edits else None


def ldg(code: str, language: str) -> str | None:
    if language != "cuda":
        return None
    data, root = _parse(code, language)
    aliases = {m.group(2): " ".join(m.group(1).split()) for m in _TYPEDEF.finditer(code)}
    edits: list[tuple[int, int, str]] = []
    for fn in _functions(root):
        body = fn.child_by_field_name("body")
        written = _written(body)
        names = set()
        for p, name in _pointer_params(fn):
            t = " ".join(re.findall(r"[\w]+", _text(p).split("*")[0]))
            base = " ".join(w for w in t.split() if w not in ("const", "__restrict__"))
            base = aliases.get(base, base)
            if ("const" in t and "__restrict__" in _text(p) and name not in written
                    and base in LDG_TYPES):
                names.add(name)
        for n in _walk(body):
            if n.type == "subscript_expression" and _base_name(n) in names:
                parent = n.parent
                if parent is not None and parent.type in ("pointer_expression",) \
                        and _text(parent).startswith("&"):
                    continue
                edits.append((n.start_byte, n.end_byte, f"__ldg(&{_text(n)})"))
    return _edit(data, edits) if edits else None


def _preceded_by_pragma(loop: Node) -> bool:
    prev = loop.prev_sibling
    return prev is not None and prev.type in ("preproc_call", "preproc_pragma") or (
        prev is not None and _text(prev).lstrip().startswith("#pragma"))


def _enclosing_loop(n: Node) -> Node | None:
    p = n.parent
    while p is not None and p.type != "function_definition":
        if p.type in ("for_statement", "while_statement", "do_statement"):
            return p
        p = p.parent
    return None


def _in_collapse_nest(loop: Node, outer: Node) -> bool:
    body = outer.child_by_field_name("body")
    direct = body is loop or (body is not None and body.type == "compound_statement"
                              and [c for c in body.named_children if c.type != "comment"]
                              == [loop])
    return direct


def unroll(code: str, language: str) -> str | None:
    data, root = _parse(code, language)
    pragma = "#pragma unroll 4" if language == "cuda" else "#pragma GCC unroll 4"
    collapse = "collapse" in code
    edits = []
    for loop in (n for n in _walk(root) if n.type == "for_statement"):
        if any(d.type == "for_statement" for d in _walk(loop) if d is not loop):
            continue
        if _preceded_by_pragma(loop):
            continue
        outer = _enclosing_loop(loop)
        if language == "c" and (outer is None or (collapse and _in_collapse_nest(loop, outer))):
            continue
        if outer is None and language == "cuda" and _enclosing_function(loop) is None:
            continue
        if loop.parent is not None and loop.parent.type != "compound_statement":
            continue
        indent = " " * loop.start_point[1]
        edits.append((loop.start_byte, loop.start_byte, f"{pragma}\n{indent}"))
    return _edit(data, edits) if edits else None


def _enclosing_function(n: Node) -> Node | None:
    while n is not None and n.type != "function_definition":
        n = n.parent
    return n


_IDX = re.compile(r"^\(?\s*(?:\([\w ]+\)\s*)?blockIdx\.x\s*\)?\s*\*\s*blockDim\.x\s*\+\s*"
                  r"threadIdx\.x$|^threadIdx\.x\s*\+\s*(?:\([\w ]+\)\s*)?blockIdx\.x\s*\*\s*"
                  r"blockDim\.x$")


def grid_stride(code: str, language: str) -> str | None:
    """``T i = IDX; if (i < n) S;`` as the last two statements -> a grid-stride loop."""
    if language != "cuda":
        return None
    data, root = _parse(code, language)
    edits = []
    for fn in _functions(root):
        stmts = [c for c in fn.child_by_field_name("body").named_children if c.type != "comment"]
        if len(stmts) < 2 or stmts[-1].type != "if_statement" or stmts[-2].type != "declaration":
            continue
        decl, cond_stmt = stmts[-2], stmts[-1]
        m = re.fullmatch(r"(?:const\s+)?([\w ]+?)\s+(\w+)\s*=\s*(.+);", _text(decl),
                         re.DOTALL)
        if not m or not _IDX.match(" ".join(m.group(3).split())):
            continue
        typ, var = m.group(1), m.group(2)
        cond = cond_stmt.child_by_field_name("condition")
        cm = re.fullmatch(r"\(\s*" + re.escape(var) + r"\s*<\s*([\w.]+)\s*\)", _text(cond))
        if not cm or cond_stmt.child_by_field_name("alternative") is not None:
            continue
        body = _text(cond_stmt.child_by_field_name("consequence"))
        if re.search(r"\breturn\b|__syncthreads|\bbreak\b", body) or \
                re.search(r"\b" + re.escape(var) + r"\s*(=[^=]|\+\+|--|[+\-*/]=)", body):
            continue
        loop = (f"for ({typ} {var} = {m.group(3)}; {var} < {cm.group(1)};\n"
                f"         {var} += ({typ})gridDim.x * blockDim.x) {body}")
        edits.append((decl.start_byte, cond_stmt.end_byte, loop))
    return _edit(data, edits) if edits else None


_OMP_FOR = re.compile(r"^(\s*#\s*pragma\s+omp\s+(?:parallel\s+)?for)\b(?!\s+simd)(.*)$",
                      re.DOTALL)
_REDUCTION = re.compile(r"\breduction\s*\(\s*([^:)]+):")


def omp_simd(code: str, language: str) -> str | None:
    """C: ``#pragma omp [parallel] for`` -> ``... for simd`` on a loop with no loop inside it
    and no reduction but ``max``/``min`` (exact in any order: results stay bitwise equal; a
    ``+`` reduction would be reassociated). The one rule for a single OpenMP loop, such as a
    max-reduction, that the others (restrict/const already there, no nest to unroll) leave."""
    if language != "c":
        return None
    data, root = _parse(code, language)
    edits = []
    for loop in (n for n in _walk(root) if n.type == "for_statement"):
        prev = loop.prev_sibling
        m = _OMP_FOR.match(_text(prev)) if prev is not None else None
        if m is None or "collapse" in m.group(2) or \
                any(d.type == "for_statement" for d in _walk(loop) if d is not loop):
            continue
        if any(op.strip() not in ("max", "min") for op in _REDUCTION.findall(m.group(2))):
            continue
        edits.append((prev.start_byte, prev.end_byte, f"{m.group(1)} simd{m.group(2)}"))
    return _edit(data, edits) if edits else None


RULES: dict[str, Callable[[str, str], str | None]] = {
    "restrict_const": restrict_const, "ldg": ldg, "unroll": unroll, "grid_stride": grid_stride,
    "zmarch": zmarch, "omp_simd": omp_simd,
}


def applicable(code: str, language: str | None = None) -> dict[str, str]:
    """Every rule that changes ``code``, with its result."""
    lang = language or language_of(code)
    out = {}
    for name, rule in RULES.items():
        new = rule(code, lang)
        if new is not None and new != code:
            out[name] = new
    return out
