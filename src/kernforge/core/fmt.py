"""Human-readable formatting shared by the CLI and the reports."""

from __future__ import annotations

import math


def fmt_time(seconds: float | None) -> str:
    """Seconds with the largest unit that keeps the value >= 1 (s, ms, us, ns); '-' if unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return f"{seconds * 1e9:.1f} ns"
