"""What a backend's sanitizer run returns (the validation gate of docs/integrity.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SanitizerRun:
    """One tool's run of a variant on the recorded state: ``finding`` is True when the tool
    reported an error (``report`` is its report); ``available`` is False when the tool could
    not be built or run here (``report`` says why, and nothing was checked)."""

    tool: str
    finding: bool
    report: str
    seconds: float
    available: bool = True
