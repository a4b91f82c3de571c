"""The syntax queries of the rule-based rewrites (:mod:`.rules`, :mod:`.zmarch`), over the shared
tree-sitter helpers of :mod:`kernforge.syntax`."""

from __future__ import annotations

from ...syntax import Node
from ...syntax import edit as _edit
from ...syntax import parse as _parse
from ...syntax import parser as _parser
from ...syntax import text as _text
from ...syntax import walk as _walk

__all__ = ["Node", "_edit", "_parse", "_parser", "_text", "_walk"]
_WRITE_OPS = {"assignment_expression", "update_expression"}


def _functions(root: Node) -> list[Node]:
    return [n for n in _walk(root) if n.type == "function_definition"]


def _pointer_params(fn: Node) -> list[tuple[Node, str]]:
    """(parameter_declaration, name) for each pointer parameter of ``fn``."""
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    out = []
    for p in (plist.named_children if plist is not None else []):
        d = p.child_by_field_name("declarator") if p.type == "parameter_declaration" else None
        if d is not None and d.type == "pointer_declarator":
            inner = d.child_by_field_name("declarator")
            if inner is not None and inner.type == "identifier":
                out.append((p, _text(inner)))
    return out


def _base_name(expr: Node) -> str | None:
    while expr is not None and expr.type in ("subscript_expression", "pointer_expression",
                                             "parenthesized_expression", "field_expression"):
        expr = (expr.child_by_field_name("argument") or expr.child_by_field_name("operand")
                or (expr.named_children[0] if expr.named_children else None))
    return _text(expr) if expr is not None and expr.type == "identifier" else None


def _written(body: Node) -> set[str]:
    """Names written through (p[i] = ..., *p = ..., p[i]++), passed to calls, or reassigned."""
    out: set[str] = set()
    for n in _walk(body):
        if n.type in _WRITE_OPS:
            target = n.child_by_field_name("left") or n.child_by_field_name("argument")
            name = _base_name(target) if target is not None else None
            if name:
                out.add(name)
        elif n.type == "call_expression":
            args = n.child_by_field_name("arguments")
            for a in (args.named_children if args is not None else []):
                if a.type == "identifier" or _base_name(a):
                    out.add(_base_name(a) or _text(a))
    return out
