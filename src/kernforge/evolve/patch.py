"""Turn a model's reply into new source: SEARCH/REPLACE edits or a full rewrite.

Two reply formats are understood, in this order:

* SEARCH/REPLACE blocks (``<<<<<<< SEARCH`` / ``=======`` / ``>>>>>>> REPLACE``, any number,
  inside or outside code fences). Each search text must match the source exactly once; when it
  does not match exactly, lines are compared ignoring trailing and then all repeated
  whitespace.
* a full rewrite: the longest fenced code block (```` ```cuda ````, ```` ```c ````, ...).

A reply that cannot be applied gives a :class:`PatchResult` whose ``kind`` says why and whose
``message`` says what to fix (for a search text not found: the closest line of the source).
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$")
_FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+.#-]*)[^\n]*$")
CODE_LANGS = {"", "c", "cpp", "c++", "cc", "cu", "cuda", "cxx", "h", "hpp", "opencl", "cl"}


class PatchError(str, enum.Enum):
    NO_BLOCKS = "no_blocks"  # neither SEARCH/REPLACE blocks nor a fenced code block
    SEARCH_NOT_FOUND = "search_not_found"
    AMBIGUOUS = "ambiguous"  # a search text matches more than once
    EMPTY_RESULT = "empty_result"
    NO_CHANGE = "no_change"  # applied, but the source is unchanged
    MALFORMED = "malformed"  # a SEARCH block without its divider or REPLACE marker


@dataclass(frozen=True)
class Edit:
    search: str
    replace: str


@dataclass(frozen=True)
class ParsedReply:
    edits: tuple[Edit, ...] = ()
    rewrite: str | None = None
    malformed: str = ""


@dataclass(frozen=True)
class PatchResult:
    """``code`` is the new source when ``kind`` is ``None``; otherwise ``message`` says why."""

    code: str | None
    kind: PatchError | None = None
    message: str = ""
    mode: str = ""  # "diff" or "rewrite"
    applied: int = 0

    @property
    def ok(self) -> bool:
        return self.kind is None and self.code is not None


def _fenced_blocks(lines: Sequence[str]) -> list[tuple[str, str]]:
    """(language, body) of each fenced block; an unterminated last fence runs to the end."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, body = m.group(1), m.group(2).lower(), []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence[:3]):
            body.append(lines[i])
            i += 1
        out.append((lang, "\n".join(body)))
        i += 1
    return out


def _search_blocks(lines: Sequence[str]) -> tuple[list[Edit], str]:
    edits: list[Edit] = []
    i = 0
    while i < len(lines):
        if not _SEARCH.match(lines[i]):
            i += 1
            continue
        search: list[str] = []
        replace: list[str] = []
        i += 1
        while i < len(lines) and not _DIVIDER.match(lines[i]):
            if _SEARCH.match(lines[i]) or _REPLACE.match(lines[i]):
                return edits, f"SEARCH block {len(edits) + 1} has no ======= divider"
            search.append(lines[i])
            i += 1
        i += 1
        while i < len(lines) and not _REPLACE.match(lines[i]):
            replace.append(lines[i])
            i += 1
        if i >= len(lines):
            return edits, f"SEARCH block {len(edits) + 1} has no >>>>>>> REPLACE marker"
        edits.append(Edit("\n".join(search), "\n".join(replace)))
        i += 1
    return edits, ""


def parse_reply(text: str) -> ParsedReply:
    lines = text.replace("\r\n", "\n").split("\n")
    edits, malformed = _search_blocks(lines)
    if edits or malformed:
        return ParsedReply(edits=tuple(edits), malformed=malformed)
    blocks = [body for lang, body in _fenced_blocks(lines) if lang in CODE_LANGS]
    if not blocks:
        return ParsedReply()
    return ParsedReply(rewrite=max(blocks, key=len))


_NORMALIZERS: tuple[Callable[[str], str], ...] = (
    lambda s: s.rstrip(),
    lambda s: " ".join(s.split()),
)


def _trim(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def _line_matches(source: list[str], search: list[str], norm: Callable[[str], str]) -> list[int]:
    want = [norm(s) for s in search]
    have = [norm(s) for s in source]
    n = len(want)
    return [i for i in range(len(have) - n + 1) if have[i:i + n] == want]


def closest_line(source: str, search: str) -> tuple[int, str, float]:
    """(1-based line number, text, similarity) of the source line most like the first
    non-blank line of ``search``."""
    first = next((s.strip() for s in search.split("\n") if s.strip()), "")
    best = (0, "", 0.0)
    for no, line in enumerate(source.split("\n"), 1):
        ratio = difflib.SequenceMatcher(None, first, line.strip()).ratio()
        if ratio > best[2]:
            best = (no, line, ratio)
    return best


def _apply_one(source: str, edit: Edit, index: int) -> tuple[str | None, PatchResult | None]:
    where = f"SEARCH block {index}"
    if not edit.search.strip():
        return None, PatchResult(None, PatchError.SEARCH_NOT_FOUND, f"{where} is empty",
                                 mode="diff", applied=index - 1)
    count = source.count(edit.search)
    if count == 1:
        return source.replace(edit.search, edit.replace, 1), None
    if count > 1:
        return None, PatchResult(None, PatchError.AMBIGUOUS,
                                 f"{where} matches {count} places; include more context lines",
                                 mode="diff", applied=index - 1)
    src_lines = source.split("\n")
    search_lines = _trim(edit.search.split("\n"))
    for norm in _NORMALIZERS:
        hits = _line_matches(src_lines, search_lines, norm)
        if len(hits) == 1:
            i = hits[0]
            new = src_lines[:i] + _trim(edit.replace.split("\n")) + src_lines[i + len(search_lines):]
            return "\n".join(new), None
        if len(hits) > 1:
            return None, PatchResult(
                None, PatchError.AMBIGUOUS,
                f"{where} matches {len(hits)} places (ignoring whitespace); include more context",
                mode="diff", applied=index - 1)
    no, line, ratio = closest_line(source, edit.search)
    return None, PatchResult(
        None, PatchError.SEARCH_NOT_FOUND,
        f"{where} not found in the source; closest line {no} ({ratio:.0%} similar): "
        f"{line.strip()!r}", mode="diff", applied=index - 1)


def apply_edits(source: str, edits: Sequence[Edit]) -> PatchResult:
    code = source
    for k, edit in enumerate(edits, 1):
        new, failure = _apply_one(code, edit, k)
        if failure is not None or new is None:
            return failure or PatchResult(None, PatchError.SEARCH_NOT_FOUND, "not applied")
        code = new
    return _finish(source, code, "diff", len(edits))


def _finish(source: str, code: str, mode: str, applied: int) -> PatchResult:
    if not code.strip():
        return PatchResult(None, PatchError.EMPTY_RESULT, "the result is empty", mode, applied)
    if code.strip() == source.strip():
        return PatchResult(None, PatchError.NO_CHANGE, "the result equals the parent", mode,
                           applied)
    return PatchResult(code, mode=mode, applied=applied)


def apply_reply(source: str, reply: str) -> PatchResult:
    """Apply a model's reply to ``source``: SEARCH/REPLACE blocks first, else a rewrite."""
    parsed = parse_reply(reply)
    if parsed.malformed:
        return PatchResult(None, PatchError.MALFORMED, parsed.malformed, mode="diff")
    if parsed.edits:
        return apply_edits(source, parsed.edits)
    if parsed.rewrite is not None:
        if not parsed.rewrite.strip():
            return PatchResult(None, PatchError.EMPTY_RESULT, "the code block is empty",
                               mode="rewrite")
        return _finish(source, parsed.rewrite + "\n", "rewrite", 1)
    return PatchResult(None, PatchError.NO_BLOCKS,
                       "the reply has no SEARCH/REPLACE block and no fenced code block; answer "
                       "with <<<<<<< SEARCH / ======= / >>>>>>> REPLACE blocks or the full "
                       "kernel in a ``` block")
