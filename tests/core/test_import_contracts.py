"""The import contracts themselves (pyproject.toml, tools/import_contracts.py): every package of
kernforge sits on a layer, core imports only the standard library and numpy (checked here
without import-linter too), and the ``allowed_externals`` contract really fails on a
third-party import that a ``forbidden`` contract of named packages would let through."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "kernforge"
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def _contract(name: str) -> dict:
    (c,) = [c for c in CONFIG["contracts"] if c["name"] == name]
    return c


def _layered() -> set[str]:
    layers = _contract("DESIGN.md layers")["layers"]
    return {name.strip() for layer in layers for name in layer.split("|")}


def test_every_package_is_on_a_layer() -> None:
    """A package on no layer is checked by no contract (``testing`` once was)."""
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    modules = {p.stem for p in SRC.glob("*.py") if not p.stem.startswith("_")}
    missing = sorted((packages | modules) - _layered())
    assert not missing, f"add {missing} to a layer of the 'DESIGN.md layers' contract"
    assert "testing" in _layered()


def _imports(path: Path) -> set[str]:
    """Top-level names of every absolute import in a file, function-level imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_core_imports_only_the_standard_library_and_numpy() -> None:
    allowed = set(sys.stdlib_module_names) | {"numpy", "kernforge"}
    bad = {f"{p.relative_to(SRC)}: {name}" for p in (SRC / "core").rglob("*.py")
           for name in _imports(p) - allowed}
    assert not bad, f"core imports beyond stdlib + numpy: {sorted(bad)}"
    assert _contract("core is stdlib + numpy only")["allowed"] == ["numpy"]


def _check(tmp_path: Path, core_code: str) -> list[dict[str, str]]:
    sys.path.insert(0, str(ROOT))
    try:
        from tools.import_contracts import AllowedExternalsContract
    finally:
        sys.path.remove(str(ROOT))
    pkg = tmp_path / "kfprobe"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text(core_code)
    sys.path.insert(0, str(tmp_path))
    try:
        graph = grimp.build_graph("kfprobe", include_external_packages=True, cache_dir=None)
    finally:
        sys.path.remove(str(tmp_path))
    contract = AllowedExternalsContract(
        "core is stdlib + numpy only", {"root_packages": ["kfprobe"]},
        {"source_modules": ["kfprobe.core"], "allowed": ["numpy"]})
    check = contract.check(graph, verbose=False)
    assert check.kept == (not check.metadata["found"])
    return list(check.metadata["found"])


def test_allowed_externals_fails_on_an_unlisted_package(tmp_path: Path) -> None:
    code = "import json\nimport numpy\n\ndef f():\n    import optuna\n    return optuna\n"
    assert _check(tmp_path, code) == [{"importer": "kfprobe.core", "imported": "optuna"}]


def test_allowed_externals_keeps_stdlib_and_listed(tmp_path: Path) -> None:
    assert _check(tmp_path, "import json, os.path\nimport numpy as np\n") == []
