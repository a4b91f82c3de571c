"""tree-sitter helpers shared by the rule-based rewrites (:mod:`.rules`, :mod:`.zmarch`)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

Node = Any
_WRITE_OPS = {"assignment_expression", "update_expression"}


@functools.cache
def _parser(language: str) -> Any:
    import tree_sitter as ts

    grammar = __import__("tree_sitter_cuda" if language == "cuda" else "tree_sitter_c")
    return ts.Parser(ts.Language(grammar.language()))


def _parse(code: str, language: str) -> tuple[bytes, Node]:
    data = code.encode()
    return data, _parser(language).parse(data).root_node


def _walk(node: Node) -> Iterator[Node]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _text(n: Node) -> str:
    return n.text.decode()


def _edit(data: bytes, edits: list[tuple[int, int, str]]) -> str:
    for start, end, new in sorted(edits, reverse=True):
        data = data[:start] + new.encode() + data[end:]
    return data.decode()


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
