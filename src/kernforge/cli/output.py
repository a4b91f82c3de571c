"""Shared console helpers of the CLI: one rich console, number formatting, option parsing."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..core import ConfigError, Measurement
from ..pipeline.notes import Notes

# Not a terminal (CI logs, pipes): wide enough that tables are not cut.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 140)


def fmt_error(m: Measurement) -> str:
    if not m.checks:
        return "-"
    worst = max(m.checks, key=lambda c: (not c.passed, c.max_abs))
    if worst.passed and worst.max_abs == 0.0:
        return "0 (bitwise)"  # every buffer equal: no one buffer to name
    return f"{worst.max_abs:.2e} ({worst.name})"


def parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    try:
        return int(text)
    except ValueError:
        return text


def parse_pairs(items: Iterable[str] | None, what: str, *, typed: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"{what} {item!r} is not KEY=VALUE",
                              hint=f"write e.g. --{what} NAME=VALUE")
        if key in out:  # the last would silently win over the first
            raise ConfigError(f"--{what} {key} is given twice ({key}={given[key]} and {item})",
                              hint=f"give one --{what} {key}=VALUE")
        out[key], given[key] = (parse_value(value) if typed else value), value
    return out


def wrapped(text: str, width: int, indent: str = "  ") -> str:
    """``text`` complete, wrapped at ``width`` between words (a path or a long word stays
    whole), lines after the first indented: for reasons of a paragraph's length."""
    return textwrap.fill(" ".join(text.split()), width=max(40, width), subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def notes() -> Notes:
    """What the unit pipelines say, printed: progress lines, damaged units skipped (counted
    for exit status 7, :mod:`.damaged`), spooled launches left as they were, results not
    exported."""
    from . import damaged

    return Notes(
        say=lambda line: console.print(line, markup=False),
        damaged=damaged.skip,
        warn=lambda line: err_console.print(f"[yellow]warning: a spooled launch was not turned "
                                            f"into a unit:[/] {escape(line)}", soft_wrap=True),
        skipped=lambda line: err_console.print(f"skipped {escape(line)}", soft_wrap=True))
