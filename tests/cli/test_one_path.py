"""The CLI parses arguments and prints; units of every kind take one path through the library
(issue 41, item 1). Read from the source's syntax trees, not from a run: no module of
``kernforge.cli`` imports the internals of native units (their replay, tuning, building,
sharing, recording format, deployment spec, interposer) or of the unit pipelines; the commands
that take units reach them through the one entry point, ``kernforge.pipeline.units``, and
``kernforge run --deploy`` a native spec through ``kernforge.deploy.interposed``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "src" / "kernforge" / "cli"

# what only the library touches: a name, or a prefix of names ending in "_" or "."
INTERNAL = ("kernforge.replay.native", "kernforge.deploy.native", "kernforge.core.native",
            "kernforge.record.native_format", "kernforge.record.interposer",
            "kernforge.pipeline.native_", "kernforge.pipeline.export",
            "kernforge.pipeline.tune_run", "kernforge.pipeline.evolve_run",
            "kernforge.pipeline.loading", "kernforge.backends.image_build",
            "kernforge.backends.placement")
UNITS = "kernforge.pipeline.units"
# each command that takes recorded units, and the entry point it calls
ENTRY = {"replay_cmd": UNITS, "inspect_cmd": UNITS, "tune_cmd": UNITS, "export_cmd": UNITS,
         "evolve_cmd": UNITS, "native_launch": "kernforge.deploy.interposed"}


def imports(source: str, module: str) -> set[str]:
    """Every module ``source`` (the module ``kernforge.cli.<module>``) imports, at its top
    or inside a function; ``from X import Y`` counts as X and X.Y (Y may be a module)."""
    package = ["kernforge", "cli"]
    out: set[str] = set()
    for node in ast.walk(ast.parse(source, filename=module)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            name = ".".join(base + ([node.module] if node.module else []))
            out.add(name)
            out.update(f"{name}.{alias.name}" for alias in node.names)
    return out


def internal(names: set[str]) -> list[str]:
    """The names among ``names`` that only the library may import."""
    return sorted(n for n in names if any(
        n == p or n.startswith(p if p.endswith(("_", ".")) else p + ".")
        or (p.endswith("native") and n.startswith(p + "_")) for p in INTERNAL))


def cli_modules() -> dict[str, str]:
    return {p.stem: p.read_text("utf-8") for p in sorted(CLI.glob("*.py"))}


def test_no_cli_module_imports_what_only_the_library_touches() -> None:
    found = {name: bad for name, src in cli_modules().items()
             if (bad := internal(imports(src, name)))}
    assert not found, f"cli modules import the library's internals: {found}"


@pytest.mark.parametrize("module", sorted(ENTRY))
def test_each_command_goes_through_its_entry_point(module: str) -> None:
    assert ENTRY[module] in imports(cli_modules()[module], module)


def test_the_check_can_fail() -> None:
    """What the CLI held before: native tuning, the native result's name, the spec writer,
    the unit loader, and a pipeline's internals, relative and absolute."""
    for line in ("from ..replay.native_tune import RESULT",
                 "from ..replay import native_build",
                 "from ..backends.image_build import bind_source",
                 "from ..deploy import native as nd",
                 "from ..record.native_format import read_native",
                 "import kernforge.core.native",
                 "from ..pipeline.native_units import tune_native_units",
                 "from ..pipeline.tune_run import tune_all",
                 "def f():\n    from ..record import interposer\n"):
        assert internal(imports(line, "x")), line
    for line in ("from ..pipeline.units import tune_units", "from ..deploy import interposed",
                 "from ..replay.tuning import TuningOutcome", "from ..record import clean_partial",
                 "from .native_cmd import print_native_replay"):
        assert not internal(imports(line, "x")), line
