"""docs/architecture.md matches the code: the layers pyproject.toml's import-linter contract
enforces, and a section for every package of ``src/kernforge`` (issue 41, item 5)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"


def contract_layers() -> list[str]:
    """The ``layers`` list of the import-linter contract (read as text: no tomllib on 3.10)."""
    (body,) = re.findall(r"^layers = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(),
                         flags=re.MULTILINE | re.DOTALL)
    layers = re.findall(r'"([^"]+)"', body)
    return [" | ".join(part.strip() for part in layer.split("|")) for layer in layers]


def page_layers() -> list[str]:
    """The layer line of the page's first fenced block."""
    block = PAGE.read_text().split("```")[1]
    (line,) = [ln for ln in block.splitlines() if "─▶" in ln]
    return [part.strip() for part in line.split("─▶")]


def packages() -> set[str]:
    src = ROOT / "src" / "kernforge"
    pkgs = {p.name for p in src.iterdir() if (p / "__init__.py").exists()}
    mods = {p.stem for p in src.glob("*.py") if not p.name.startswith("_")}
    return pkgs | mods


def test_the_page_draws_the_enforced_layers() -> None:
    assert page_layers() == contract_layers(), (
        "docs/architecture.md's layer line differs from [tool.importlinter] in pyproject.toml")


def test_every_package_has_a_section() -> None:
    headings = " ".join(re.findall(r"^###? .*$", PAGE.read_text(), flags=re.MULTILINE))
    named = set(re.findall(r"`(\w+)`", headings))
    missing = sorted(packages() - named)
    assert not missing, f"docs/architecture.md has no section for: {missing}"
    stale = sorted(n for n in named if n not in packages())
    assert not stale, f"docs/architecture.md has sections for packages that are gone: {stale}"
