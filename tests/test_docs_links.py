"""The docs and the README point only at files that exist (issue 41, item 5).

Two kinds of reference are checked in README.md and every page under docs/ (the dated
benchmark pages included):

- a relative Markdown link or image, ``[text](path)``, resolved against the page's folder;
- a repository path in backticks (inline or in a fenced block) that starts with one of
  :data:`TREES`, resolved against the repository root; or a package path written without
  ``src/`` (``kernforge/forge/loop.py``) or without ``src/kernforge/`` (``forge/loop.py``). A glob (``tests/forge/test_*.py``)
  must match at least one file; a pytest node id (``path::test``) or a line number
  (``path:42``) is checked for its path.

Paths a run writes (under an ``out``, ``runs`` or ``results`` folder, or a ``<placeholder>``)
are not files of the tree and are not checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREES = ("src/", "benchmarks/", "tools/", "examples/", "tests/", "docs/")
# folders a command writes, not part of the tree
WRITTEN = ("/out/", "/out-", "/runs/", "/results/")

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`([^`\n]+)`")


def path_token(prefixes: tuple[str, ...], chars: str) -> re.Pattern[str]:
    """A path that starts with one of ``prefixes`` at a word's start, then ``chars``."""
    return re.compile(r"(?<![\w./-])((?:" + "|".join(map(re.escape, prefixes)) + ")[" + chars + "]*)")


PATH_TOKEN = path_token(TREES, r"\w./*\-{},")
# a package path without ``src/`` (``kernforge/forge/loop.py``) or without ``src/kernforge/``
# (``forge/loop.py``, a file of one of the package's subpackages)
SUBPACKAGES = tuple(sorted(f"{p.name}/" for p in (ROOT / "src" / "kernforge").iterdir()
                           if (p / "__init__.py").exists()))
PACKAGE_TOKEN = path_token(("kernforge/",), r"\w./*\-")
MODULE_TOKEN = path_token(SUBPACKAGES, r"\w./*\-")
SOURCE_SUFFIXES = (".py", ".c", ".h")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def code_spans(text: str) -> list[str]:
    """Inline code spans and the lines of fenced blocks."""
    spans: list[str] = []
    prose: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        (spans if fenced else prose).append(line)
    for line in prose:
        spans.extend(INLINE_CODE.findall(line))
    return spans


def prose_links(text: str) -> list[str]:
    """Link targets outside fenced blocks."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.extend(LINK.findall(INLINE_CODE.sub("", line)))
    return out


def exists(path: Path, pattern: str) -> bool:
    if any(c in pattern for c in "*?["):
        return any(ROOT.glob(pattern))
    return path.exists()


def broken_links(page: Path) -> list[str]:
    bad = []
    for target in prose_links(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, a mail address or an anchor on the same page
        rel = target.split("#", 1)[0]
        if rel and not (page.parent / rel).exists():
            bad.append(f"link ({target})")
    return bad


def tokens(span: str) -> list[str]:
    """Repository paths in one code span, relative to the repository's root."""
    return (PATH_TOKEN.findall(span) + ["src/" + t for t in PACKAGE_TOKEN.findall(span)]
            + ["src/kernforge/" + t for t in MODULE_TOKEN.findall(span)
               if t.rstrip(".,;)").endswith(SOURCE_SUFFIXES)])


def named_paths(text: str) -> list[str]:
    out = []
    for span in code_spans(text):
        for token in tokens(span):
            token = re.sub(r"::.*$", "", token)  # pytest node id
            token = re.sub(r":\d+(-\d+)?$", "", token)  # line number
            token = token.rstrip(".,;)")
            if "<" in token or "{" in token or any(w in token for w in WRITTEN):
                continue
            out.append(token)
    return out


def broken_paths(page: Path) -> list[str]:
    return [f"`{p}`" for p in named_paths(page.read_text()) if not exists(ROOT / p, p)]


def test_the_checker_finds_a_missing_file(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("See [it](gone.md), [that](#anchor), [web](https://x.org/a.md).\n"
                    "Run `python benchmarks/no_such_bench.py --x` and "
                    "`tests/core/test_model.py::test_x`, `forge/gone.py`, `kernforge/core/model.py`,"
                    " `out/forge/x.py`.\n```\npython tools/missing.py\n```\n")
    assert broken_links(page) == ["link (gone.md)"]
    assert sorted(named_paths(page.read_text())) == [
        "benchmarks/no_such_bench.py", "src/kernforge/core/model.py", "src/kernforge/forge/gone.py",
        "tests/core/test_model.py", "tools/missing.py"]
    assert sorted(broken_paths(page)) == ["`benchmarks/no_such_bench.py`",
                                          "`src/kernforge/forge/gone.py`", "`tools/missing.py`"]


def test_build_files_name_only_existing_paths() -> None:
    """pyproject.toml and the Makefile (their comments included) name no path that is gone."""
    token = path_token((*TREES, "scripts/"), r"\w./*\-")
    bad = [f"{name}: {p}" for name in ("pyproject.toml", "Makefile")
           for p in token.findall((ROOT / name).read_text()) if not exists(ROOT / p, p)]
    assert not bad, f"build files name paths that do not exist: {bad}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_reference_exists(page: Path) -> None:
    bad = broken_links(page) + broken_paths(page)
    assert not bad, (f"{page.relative_to(ROOT)} points at files that do not exist: "
                     + ", ".join(bad) + " (fix the path, or drop the reference)")
