"""CUDA modules are compiled and loaded only by the cuda backend (issue 41, item 2), read from
the syntax trees of every module of ``src/kernforge`` outside ``backends/``. A module there
may not

- import ``cupy.cuda.compiler`` (``import cupy.cuda.compiler``, ``from cupy.cuda import
  compiler``, ``from cupy.cuda.compiler import ...``) or reach it as ``<x>.cuda.compiler``;
- make a ``RawModule`` (call ``RawModule(...)`` or ``<x>.RawModule(...)``, or pass the name
  ``"RawModule"`` to a call, as ``original_class(cp, "RawModule")`` does);
- name a ``cuModuleLoad*`` or an NVRTC API function (``nvrtcCreateProgram``, ...): as a name,
  an attribute (``lib.nvrtcCompileProgram``) or a string passed to a call (``getattr``,
  ``dlsym``);
- run nvcc or ptxas: a list or tuple literal whose first item is ``"nvcc"`` or ``"ptxas"`` and
  not all of whose items are tool names (a command line, not a list of tools), or one with an
  nvcc output kind among its items (``"-cubin"``, ``"-ptx"``, ``"-fatbin"``, also as a branch
  of ``a if c else b``): a command line whose compiler is a variable.

The forge and the stencil matrix get all of it from ``backends/cuda_build.py`` (parallel nvcc
and NVRTC builds, ptxas) and ``backends/cuda_modules.py`` (modules from source or a cubin).
C sources (the interposer, the fake driver) are not Python and not scanned."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "kernforge"
API = re.compile(r"^(cuModuleLoad\w*|nvrtc[A-Z]\w*)$")
TOOLS = ("nvcc", "ptxas")
OUTPUTS = {"-cubin", "-ptx", "-fatbin", "--cubin", "--ptx", "--fatbin"}  # nvcc's output kinds
# what another change owns: each with the reason it stays for now
KNOWN: dict[str, str] = {}


def _constants(node: ast.AST) -> set[object]:
    """The constant an item is, or the constants of both branches of ``a if c else b``."""
    if isinstance(node, ast.Constant):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _constants(node.body) | _constants(node.orelse)
    return set()


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def findings(tree: ast.AST) -> list[str]:
    """What in ``tree`` compiles or loads CUDA (see the module docstring), as ``line: what``."""
    out = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            out += [f"{line}: import {a.name}" for a in node.names
                    if a.name.startswith("cupy.cuda.compiler")]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.startswith("cupy.cuda.compiler") or (
                    node.module == "cupy.cuda" and any(a.name == "compiler" for a in node.names)):
                out.append(f"{line}: from {node.module} import ...")
        elif isinstance(node, ast.Attribute):
            if _dotted(node).endswith("cuda.compiler") and not _dotted(node).startswith(
                    "kernforge"):
                out.append(f"{line}: {_dotted(node)}")
            if API.match(node.attr):
                out.append(f"{line}: .{node.attr}")
        elif isinstance(node, ast.Name) and API.match(node.id):
            out.append(f"{line}: {node.id}")
        elif isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Name) and func.id == "RawModule") or (
                    isinstance(func, ast.Attribute) and func.attr == "RawModule"):
                out.append(f"{line}: RawModule(...)")
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and (
                        arg.value == "RawModule" or API.match(arg.value)):
                    out.append(f"{line}: call with {arg.value!r}")
        elif isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value in TOOLS and not all(
                    isinstance(e, ast.Constant) and e.value in TOOLS for e in node.elts):
                out.append(f"{line}: a {first.value} command line")
            elif any(_constants(e) & OUTPUTS for e in node.elts):
                out.append(f"{line}: a compiler command line (an nvcc output kind)")
    return out


def scanned() -> dict[str, list[str]]:
    out = {}
    for path in sorted(SRC.rglob("*.py")):
        name = str(path.relative_to(SRC))
        if name.startswith("backends/"):
            continue
        found = findings(ast.parse(path.read_text("utf-8"), filename=name))
        if found:
            out[name] = found
    return out


def test_cuda_is_built_and_loaded_only_in_backends() -> None:
    found = {k: v for k, v in scanned().items() if k not in KNOWN}
    assert not found, (f"CUDA compiled or loaded outside backends/: {found}; add what is "
                       "needed to backends/cuda_build.py or backends/cuda_modules.py and call it")


def test_each_known_exception_is_still_needed() -> None:
    stale = [k for k in KNOWN if k not in scanned()]
    assert not stale, f"KNOWN lists modules that no longer compile or load CUDA: {stale}"


def test_the_scan_sees_each_kind() -> None:
    src = '''
import cupy.cuda.compiler
from cupy.cuda import compiler
def f(cp, lib, original_class):
    cp.RawModule(path="x")
    original_class(cp, "RawModule")(code="")
    lib.nvrtcCreateProgram(None)
    getattr(lib, "cuModuleLoadData")
    cp.cuda.compiler.CompileException
    return ["ptxas", "-v"], ("nvcc", "-cubin"), [exe, "-ptx" if ptx else "-cubin"]
'''
    kinds = [f.split(": ", 1)[1] for f in findings(ast.parse(src))]
    for what in ("import cupy.cuda.compiler", "from cupy.cuda import ...", "RawModule(...)",
                 "call with 'RawModule'", ".nvrtcCreateProgram", "call with 'cuModuleLoadData'",
                 "cp.cuda.compiler", "a ptxas command line", "a nvcc command line",
                 "a compiler command line (an nvcc output kind)"):
        assert what in kinds, (what, kinds)
    harmless = ('from . import nvrtc\nnvrtc.ptx("x")\nBUILDS = ("nvrtc", "nvcc")\n'
                'TOOLS = ("nvcc", "ptxas")\n')
    assert findings(ast.parse(harmless)) == []
