"""What a backend's sanitizer run returns (the validation gate of docs/integrity.md), and the
time each run may take."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..core import ConfigError

TIMEOUT_ENV = "KERNFORGE_SANITIZER_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0


def timeout_s() -> float:
    """Seconds one sanitizer run (one tool: its start, the compile, the instrumented launch)
    may take: ``$KERNFORGE_SANITIZER_TIMEOUT_S``, default 300."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise ConfigError(f"{TIMEOUT_ENV}={raw!r} is not a positive number of seconds",
                          hint=f"unset it (default {DEFAULT_TIMEOUT_S:g} s) or set e.g. 600")
    return value


@dataclass(frozen=True)
class SanitizerRun:
    """One tool's run of a variant on the recorded state: ``finding`` is True when the tool
    reported an error (``report`` is its report); ``available`` is False when the tool could
    not be built or run here (``report`` says why, and nothing was checked); ``timed_out``:
    the run was killed after :func:`timeout_s` (``finding`` is then True: the candidate is
    rejected with reason ``sanitizer:timeout``, not for what the tool would have found)."""

    tool: str
    finding: bool
    report: str
    seconds: float
    available: bool = True
    timed_out: bool = False
