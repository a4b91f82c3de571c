"""The forge is a client of the core (issue 41, item 2), read from the source's syntax trees:

- arguments are parsed only in ``kernforge.cli``: no module of ``kernforge.forge`` or
  ``kernforge.stencil`` imports argparse;
- knob names live only in the design modules (``stencil/kernels/*.py``, ``stencil/designs.py``,
  ``stencil/matrix.py``): no string constant of a ``kernforge.forge`` module (docstrings aside)
  and no keyword argument of a call there is the name of a knob some registered design
  declares; the forge's searches read the geometry, the pairs, the untuned and unshared knobs
  and the round order from the designs;
- likewise the knobs of the designs of lifted programs (``stencil/program/codegen_*.py``
  that declare ``KNOBS``): no other module of ``kernforge.stencil.program`` and no module of
  ``kernforge.forge`` names one; the forge's search reads them from the design modules."""

from __future__ import annotations

import ast
from pathlib import Path

from kernforge.stencil import designs
from kernforge.stencil.program import designs as program_designs

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


# string constants of forge modules that equal a knob's name but name something else
NOT_KNOBS = {
    ("forge/probe.py", "zo"): "the +zo source probe (odd z-chunks marched downward), a rewrite "
                              "of its own, and the note it leaves on the operator",
}


def docstrings(tree: ast.Module) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def knob_literals(tree: ast.Module, knobs: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each string constant (not a docstring) and each call's keyword that is
    the name of one of ``knobs``."""
    skip = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in knobs and id(node) not in skip:
            found.append((node.lineno, node.value))
        elif isinstance(node, ast.keyword) and node.arg in knobs:
            found.append((node.lineno, node.arg))
    return sorted(found)


def forge_knob_literals() -> dict[tuple[str, str], list[int]]:
    knobs = set(designs.knob_names())
    out: dict[tuple[str, str], list[int]] = {}
    for name, tree in modules("forge").items():
        for line, knob in knob_literals(tree, knobs):
            out.setdefault((name, knob), []).append(line)
    return out


def test_no_forge_module_names_a_knob() -> None:
    found = {f"{mod}:{lines} {knob!r}": lines for (mod, knob), lines
             in forge_knob_literals().items() if (mod, knob) not in NOT_KNOBS}
    assert not found, (f"knob names in forge/: {sorted(found)}; declare them in the design "
                       "module (stencil/kernels/design.py's Design fields, designs.py) and "
                       "read them from the registry")


def test_each_exception_is_still_needed() -> None:
    seen = forge_knob_literals()
    stale = [k for k in NOT_KNOBS if k not in seen]
    assert not stale, f"NOT_KNOBS lists literals no forge module has any more: {stale}"


def test_the_scan_sees_a_knob_and_skips_docstrings() -> None:
    tree = ast.parse('"""lz and vx"""\ndef f(p):\n    """vx"""\n    return p["vx"], g(lz=2)\n')
    assert knob_literals(tree, {"vx", "lz"}) == [(4, "lz"), (4, "vx")]


def test_the_searches_read_what_the_designs_declare() -> None:
    for d in designs.REGISTRY.values():
        named = {*d.knobs, "l1"}
        assert set(d.untuned) <= named and set(d.unshared) <= named, d.name
    # a knob two designs name alike but mean apart is declared unshared by both
    assert "ry" in designs.get("zmarch").unshared and "ry" in designs.get("planesweep").unshared


def program_knob_literals() -> dict[tuple[str, str], list[int]]:
    """Lifted-program knob names outside their design modules (forge/, stencil/program/)."""
    knobs = program_designs.knob_names()
    own = {f"stencil/program/{m.__name__.rsplit('.', 1)[1]}.py"
           for m in program_designs.DESIGNS.values()}
    out: dict[tuple[str, str], list[int]] = {}
    for name, tree in {**modules("forge"), **modules("stencil/program")}.items():
        if name in own:
            continue
        for line, knob in knob_literals(tree, knobs):
            out.setdefault((name, knob), []).append(line)
    return out


def test_no_module_but_its_design_names_a_lifted_program_knob() -> None:
    found = {f"{mod}:{lines} {knob!r}" for (mod, knob), lines
             in program_knob_literals().items() if (mod, knob) not in NOT_KNOBS}
    assert not found, (f"lifted-program knob names outside their design modules: "
                       f"{sorted(found)}; declare them in the design module (its KNOBS, "
                       "space, refusal, presets) and read them through program.designs")


def test_the_program_designs_declare_their_knobs() -> None:
    """The scan reads the design modules' names: each names its own knobs, and the forge's
    search modules exist where the scan looks."""
    knobs = program_designs.knob_names()
    assert knobs >= {"bx", "tx", "atomic"}
    trees = modules("stencil/program")
    for m in program_designs.DESIGNS.values():
        tree = trees[f"stencil/program/{m.__name__.rsplit('.', 1)[1]}.py"]
        assert {k for _, k in knob_literals(tree, knobs)} >= set(m.KNOBS) - {"atomic"}
    assert {"forge/program_space.py", "forge/program_tune.py"} <= set(modules("forge"))
