"""Device time for a batch of applications: durations as people write them, and each
program's share of what is left.

``--budget`` is the device time of one allocation (one invocation of the batch): what earlier
invocations spent is history. Each program, when its turn comes, may take what is left of it
up to a cap: ``--program-budget`` (what is left of it, over all the program's runs) or, without
one, a quarter of the allocation (:data:`CAP_FRACTION`), never less than an even share of what
is left among the programs still waiting. Time a program does not use stays for the others.
"""

from __future__ import annotations

import math
import re

from ..core import ConfigError

MIN_START_S = 5.0  # less than this left for a program: it is not started
CAP_FRACTION = 0.25  # without --program-budget, one program takes at most this of an allocation
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(h|m|s)", re.IGNORECASE)
_SCALE = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(text: str) -> float:
    """Seconds from ``30m``, ``1h30m``, ``90s``, ``2.5h`` or a bare number of seconds."""
    t = text.strip().replace(" ", "")
    try:
        seconds = float(t)
    except ValueError:
        parts = _PART.findall(t)
        if not parts or "".join(n + u for n, u in parts).lower() != t.lower():
            raise ConfigError(f"{text!r} is not a duration",
                              hint="write it as 30m, 1h30m, 90s or a number of seconds") from None
        seconds = sum(float(n) * _SCALE[u.lower()] for n, u in parts)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{text!r} is not a positive duration",
                          hint="write it as 30m, 1h30m, 90s or a number of seconds")
    return seconds


def format_duration(seconds: float) -> str:
    """``1h 05m``, ``4m 10s``, ``12s``."""
    s = round(max(0.0, seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


def share(*, batch_left_s: float | None, programs_left: int, program_budget_s: float | None,
          program_spent_s: float, allocation_s: float | None = None) -> float | None:
    """The time the next program may take: what is left of the allocation (``batch_left_s``
    of ``allocation_s``), capped by what is left of its own budget when there is one, else
    by :data:`CAP_FRACTION` of the allocation or an even share among the ``programs_left``
    still waiting (it included), whichever is larger; None when no budget is set."""
    limits = []
    if program_budget_s is not None:
        limits.append(max(0.0, program_budget_s - program_spent_s))
    if batch_left_s is not None:
        left = max(0.0, batch_left_s)
        limits.append(left)
        if program_budget_s is None:
            even = left / max(1, programs_left)
            limits.append(max(even, CAP_FRACTION * (allocation_s or 0.0)))
    return min(limits) if limits else None
