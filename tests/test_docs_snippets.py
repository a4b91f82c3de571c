"""Every ``python`` block of README.md and docs/ runs as written (the bash blocks:
tests/cli/test_readme_commands.py): a page's blocks in one fresh directory, in order, as a
reader would paste them. A block that cannot run here is listed in ``NOT_RUN`` with what it
needs; a new block is in neither list and fails here until it runs or is listed. Where a
block's comments show what it prints or returns, that is checked too."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = {  # (page, index of its python block): what it needs
    ("applications-operators.md", 0): "a GPU: matches a recorded native unit on the device",
    ("applications-operators.md", 1): "a GPU: fuses a recorded native unit on the device",
    ("recording-cupy.md", 0): "a GPU and CuPy",
    ("deploy.md", 0): "the reader's application (run_simulation) and its deploy.json",
    ("deploy.md", 1): "a GPU (measure_overhead('cuda')) and the entries of a tuning run",
    ("evolve.md", 0): "the reader's proposers, evaluate and kernel source",
    ("service.md", 0): "the reader's variants and recordings (runs/demo/rec/...)",
    ("stencil-baselines.md", 0): "a GPU, CuPy and a matrix cell",
}
ORDER = {"recording-format.md": [1, 0]}  # "reading a unit by hand" reads the example's unit


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text("utf-8"), re.DOTALL | re.MULTILINE)


PAGES = {p.name: python_blocks(p) for p in DOCS if python_blocks(p)}
RUN = [name for name, blocks in PAGES.items()
       if any((name, i) not in NOT_RUN for i in range(len(blocks)))]


def _check_printed(code: str, where: str, out: str) -> None:
    """The comment lines right under a ``print(...)`` are what it prints ("..." elides)."""
    shown = re.search(r"^print\(.*\)\n((?:# .*\n)+)", code, re.MULTILINE)
    if shown is None:
        return
    text = "\n".join(ln[2:] for ln in shown.group(1).splitlines())
    pattern = ".*?".join(re.escape(part) for part in text.split("..."))
    assert re.search(pattern, out, re.DOTALL), f"{where} printed:\n{out}"


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p == "tuning.md"
                                  else p for p in RUN])  # tuning.md runs a tune: 8 s
def test_the_python_blocks_of_a_page_run_as_written(page: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # what the blocks write (recordings/, best.json) lands here
    blocks = PAGES[page]
    for i in ORDER.get(page, range(len(blocks))):
        if (page, i) in NOT_RUN:
            continue
        ns: dict[str, Any] = {"__name__": "__main__"}
        exec(compile(blocks[i], f"{page}, python block {i}", "exec"), ns)  # noqa: S102
        _check_printed(blocks[i], f"{page}:{i}", capsys.readouterr().out)
        if page == "integrity.md":  # what its comments say the candidate gets
            m = ns["m"]
            assert (m.status.name, dict(m.extra)["reason"]) == ("WRONG_RESULT",
                                                                 "poison:unwritten")
            assert ns["v"].verdict in ("accepted", "downgraded", "rejected", "inconclusive")


def test_every_block_runs_or_says_what_it_needs() -> None:
    blocks = {(page, i) for page, code in PAGES.items() for i in range(len(code))}
    assert set(NOT_RUN) <= blocks, f"NOT_RUN names blocks not there: {set(NOT_RUN) - blocks}"
    assert {"README.md", "stencil-programs.md", "tuning.md", "integrity.md"} <= set(RUN)
