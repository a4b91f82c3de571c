"""The forge is a client of the core (issue 41, item 2), read from the source's syntax trees:
arguments are parsed only in ``kernforge.cli``, so no module of ``kernforge.forge`` or
``kernforge.stencil`` imports argparse."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "kernforge"
PACKAGES = ("forge", "stencil")


def modules(*packages: str) -> dict[str, ast.Module]:
    """Each module of ``packages`` (by its path under src/kernforge) as a syntax tree."""
    return {str(p.relative_to(SRC)): ast.parse(p.read_text("utf-8"), filename=str(p))
            for pkg in packages for p in sorted((SRC / pkg).rglob("*.py"))}


def imported(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_no_forge_or_stencil_module_parses_arguments() -> None:
    found = sorted(name for name, tree in modules(*PACKAGES).items()
                   if "argparse" in imported(tree))
    assert not found, f"argparse outside kernforge.cli: {found} (move the parser to cli/)"


def test_the_scan_sees_an_argparse_import() -> None:
    assert "argparse" in imported(ast.parse("def f():\n    import argparse.foo\n"))
    assert "argparse" in imported(ast.parse("from argparse import Namespace\n"))
