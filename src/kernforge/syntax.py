"""tree-sitter helpers for C and CUDA C++ sources, shared by every layer that reads source:
the entry signatures (:mod:`kernforge.backends.signature`), the static integrity checks
(:mod:`kernforge.harness.static_checks`) and the rule-based rewrites
(:mod:`kernforge.evolve.proposers.syntax`).

The parsers are built on first use (one per language) and kept; importing this module loads
no tree-sitter.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from .core import SignatureError

Node = Any  # a tree_sitter.Node (the package is imported lazily)


@functools.cache
def parser(language: str) -> Any:
    """The tree-sitter parser of ``language`` ("cuda", or C for anything else)."""
    try:
        import tree_sitter as ts

        grammar = __import__("tree_sitter_cuda" if language == "cuda" else "tree_sitter_c")
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise SignatureError(f"the {language} parser is not installed ({exc})",
                             hint="pip install tree-sitter tree-sitter-c tree-sitter-cuda, or "
                                  "pass signature=... explicitly") from exc
    return ts.Parser(ts.Language(grammar.language()))


def parse(code: str, language: str) -> tuple[bytes, Node]:
    """The source's bytes and the root node of its syntax tree."""
    data = code.encode()
    return data, parser(language).parse(data).root_node


def walk(node: Node) -> Iterator[Node]:
    """Every node under ``node`` (itself first), in source order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def text(node: Node) -> str:
    """The source text of a node."""
    return str(node.text.decode("utf8", "replace"))


def edit(data: bytes, edits: list[tuple[int, int, str]]) -> str:
    """``data`` with each (start byte, end byte, new text) replaced, applied back to front."""
    for start, end, new in sorted(edits, reverse=True):
        data = data[:start] + new.encode() + data[end:]
    return data.decode()
