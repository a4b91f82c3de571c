"""The outcome of one evaluation, as typed data (never a magic metric value)."""

from __future__ import annotations

import enum


class Status(str, enum.Enum):
    """What happened to a candidate: only ``OK`` carries a valid time."""

    OK = "OK"
    INVALID_CONFIG = "INVALID_CONFIG"
    COMPILE_FAILED = "COMPILE_FAILED"
    LAUNCH_FAILED = "LAUNCH_FAILED"
    RUNTIME_FAILED = "RUNTIME_FAILED"
    TIMEOUT = "TIMEOUT"
    WRONG_RESULT = "WRONG_RESULT"

    @property
    def ok(self) -> bool:
        return self is Status.OK

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value
