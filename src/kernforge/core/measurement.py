"""What one evaluation produced: a Status, per-buffer verification, and raw time samples."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from .status import Status


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


@dataclass(frozen=True)
class BufferCheck:
    """The measured error of one output buffer against its expected contents."""

    name: str
    passed: bool
    mode: str
    size: int
    mismatches: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    norm_ratio: float = 0.0
    nan_mismatches: int = 0
    first_bad: tuple[int, ...] | None = None
    detail: str = ""

    def describe(self) -> str:
        if self.detail:
            return f"{self.name}: {self.detail}"
        where = f" first at index {self.first_bad}" if self.first_bad is not None else ""
        return (f"{self.name}: {self.mismatches}/{self.size} elements differ "
                f"(max abs {self.max_abs:.3g}, max rel {self.max_rel:.3g}, "
                f"norm ratio {self.norm_ratio:.3g}, NaN mismatches {self.nan_mismatches}){where}")


@dataclass(frozen=True)
class Measurement:
    """The result of evaluating one variant. Only ``Status.OK`` has meaningful times."""

    status: Status
    message: str = ""
    samples: tuple[float, ...] = ()  # seconds, one per timed run
    checks: tuple[BufferCheck, ...] = ()
    stages: tuple[tuple[str, float], ...] = ()  # (stage, seconds): compile, restore, run, verify
    extra: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("inf")

    @property
    def min(self) -> float:
        return min(self.samples) if self.samples else float("inf")

    @property
    def max(self) -> float:
        return max(self.samples) if self.samples else float("inf")

    @property
    def failed_checks(self) -> tuple[BufferCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    def to_json(self) -> dict[str, Any]:
        """Strict JSON: non-finite errors become the strings "inf" / "nan"."""
        return {
            "status": self.status.value, "message": self.message,
            "samples": list(self.samples),
            "median": self.median if self.samples else None,
            "checks": [{k: _finite(v) for k, v in c.__dict__.items()}
                       | {"first_bad": list(c.first_bad) if c.first_bad else None}
                       for c in self.checks],
            "stages": dict(self.stages), "extra": dict(self.extra),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Measurement:
        """The inverse of :meth:`to_json` (buffer checks included)."""
        checks = []
        for c in d.get("checks", ()):
            kw: dict[str, Any] = {k: (tuple(v) if k == "first_bad" and v is not None
                                      else _number(v)) for k, v in c.items()}
            checks.append(BufferCheck(**kw))
        samples = tuple(float(s) for s in d.get("samples", ()))
        return cls(Status(d["status"]), message=d.get("message", ""), samples=samples,
                   checks=tuple(checks), stages=tuple((k, float(v)) for k, v in
                                                      d.get("stages", {}).items()),
                   extra=tuple(d.get("extra", {}).items()))


def _number(v: Any) -> Any:
    if isinstance(v, str) and v in ("inf", "-inf", "nan"):
        return float(v)
    return v
