"""The README's list of exit codes names every code the CLI documents (cli/main.py)."""

from __future__ import annotations

import re
from pathlib import Path

from kernforge.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _codes(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"(?<![\w.-])(\d{1,3})\s+(?=[a-z`])", text)}


def test_the_readme_names_every_exit_code() -> None:
    doc = main.__doc__ or ""
    documented = _codes(doc[doc.index("Exit codes:"):])
    assert {0, 1, 2, 7, 8, 9, 130} <= documented, documented
    readme = README.read_text("utf-8")
    start = readme.index("Exit codes:")
    listed = _codes(readme[start:readme.index("\n\n", start)])
    assert documented - listed == set(), f"README.md leaves out exit codes {documented - listed}"
