"""What the unit pipelines (:mod:`.units`) tell their caller while they work: progress lines,
damaged units skipped, warnings, results refused. The pipelines print nothing themselves; the
CLI gives them callbacks that print, a library caller its own (or none: the defaults drop
them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..core.errors import KernforgeError


def _drop(_: object) -> None:
    return None


@dataclass(frozen=True)
class Notes:
    """``say``: a plain progress line; ``damaged``: a damaged unit (or result) skipped, with its
    error or reason, while the others go on; ``warn``: a spooled launch a killed recording left
    that could not be turned into a unit; ``skipped``: a result not exported, and why."""

    say: Callable[[str], None] = _drop
    damaged: Callable[[KernforgeError | str], None] = _drop
    warn: Callable[[str], None] = _drop
    skipped: Callable[[str], None] = _drop


QUIET = Notes()  # says nothing: the default of a library caller that passes none
