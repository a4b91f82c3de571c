"""Checkers: one interface for every correctness check of a candidate's outputs.

A :class:`Checker` takes the candidate's outputs and the inputs they were computed from (both
by name) and returns a :class:`CheckResult`: ok, the largest error in the checker's measure,
where it is, and a detail. Two implementations:

- :class:`RecordedChecker`: the outputs against expected contents (recorded ones, or an
  original kernel's on the same inputs), buffer by buffer under per-buffer
  :class:`~kernforge.core.Tolerance` policies, by :func:`.verify.verify` (its rules: bitwise
  unless a policy says otherwise, NaN and infinities, shapes and dtypes). ``error`` is the
  largest absolute difference over the buffers (infinite for a NaN that fails, or buffers that
  cannot be compared), ``where`` the first failing buffer and index.
- :class:`OracleChecker`: the outputs against a reference computed from the inputs by a
  function given from above (e.g. the stencil's float64 oracle, plugged in by the forge). The
  function returns :class:`Part` s: pairs of the candidate's values and the reference's at the
  same points. ``error`` is scale-invariant, ``max|out - ref| / max|ref|`` over every numeric
  part (infinite when an output value is not finite, or when the reference is all zero and the
  output is not), and passes when ``error <= tolerance``; an ``exact`` part (a region that must
  not change, e.g. a boundary) passes only when its bit patterns are identical, and the count
  of differing elements is reported under its name (parts of one name add up). The arrays of
  exact parts may stay on their device (numpy or cupy alike: only array methods are used).

A checker may refuse outputs it cannot compare at all (a shape it cannot place) with a typed
error (:class:`~kernforge.core.ConfigError`) instead of a failed result; the conformance suite
(:mod:`kernforge.testing.checkers`) accepts either as a detection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..core import BufferCheck, Tolerance
from .verify import verify


@dataclass(frozen=True)
class CheckResult:
    """A checker's verdict on one set of outputs (``detail``: what was checked, per part)."""

    ok: bool
    error: float  # the largest error in the checker's measure (inf: a non-finite output)
    tolerance: float | None  # the bound on ``error``; None where policies are per buffer
    checked_points: int
    seed: int | None
    detail: dict[str, Any] = field(default_factory=dict)
    where: str | None = None  # the worst (or first failing) point: "name[i, j, k]"
    checks: tuple[BufferCheck, ...] = ()  # RecordedChecker: one per buffer

    def to_json(self) -> dict[str, Any]:
        err = self.error if np.isfinite(self.error) else None  # strict JSON: no inf/nan
        return {"ok": self.ok, "error": err, "tolerance": self.tolerance,
                "checked_points": self.checked_points, "seed": self.seed, "detail": self.detail}

    @property
    def failed_checks(self) -> tuple[BufferCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    def describe(self) -> str:
        """One line: the failing buffers' descriptions, or the error against the tolerance."""
        if self.checks:
            return "; ".join(c.describe() for c in (self.failed_checks or self.checks))
        at = f" at {self.where}" if self.where else ""
        bound = f" (tolerance {self.tolerance:g})" if self.tolerance is not None else ""
        return f"error {self.error:.3g}{bound}{at}"


class Checker(Protocol):
    """Checks a candidate's outputs computed from ``inputs`` (both by name)."""

    def check(self, outputs: Mapping[str, Any],
              inputs: Mapping[str, Any] | None = None) -> CheckResult: ...


def _at(name: str, flat_index: int, shape: tuple[int, ...]) -> str:
    if not shape:
        return name
    idx = ", ".join(str(int(i)) for i in np.unravel_index(flat_index, shape))
    return f"{name}[{idx}]"


class RecordedChecker:
    """The outputs against ``expected`` under ``policies`` (bitwise where none is named)."""

    def __init__(self, expected: Mapping[str, np.ndarray],
                 policies: Mapping[str, Tolerance] | None = None, *,
                 seed: int | None = None) -> None:
        self.expected = dict(expected)
        self.policies = dict(policies or {})
        self.seed = seed

    def check(self, outputs: Mapping[str, Any],
              inputs: Mapping[str, Any] | None = None) -> CheckResult:
        checks = verify(outputs, self.expected, self.policies)
        failed = [c for c in checks if not c.passed]
        error = max((c.max_abs for c in checks), default=0.0)
        if any(c.detail or c.nan_mismatches for c in failed):  # NaN, or not comparable
            error = float("inf")
        where = None
        if failed:
            c = failed[0]
            where = f"{c.name}[{', '.join(str(i) for i in c.first_bad)}]" \
                if c.first_bad else c.name
        detail: dict[str, Any] = {"buffers": {c.name: c.mode for c in checks}}
        if failed:
            detail["failed"] = [c.describe() for c in failed]
        return CheckResult(not failed, error, None, sum(c.size for c in checks), self.seed,
                           detail, where, checks)


@dataclass(frozen=True)
class Part:
    """The candidate's values (``out``) and the reference's (``ref``) at the same points.
    ``exact``: compared bit for bit (``ref`` is what must be there unchanged)."""

    name: str
    out: Any
    ref: Any
    exact: bool = False


@dataclass(frozen=True)
class Comparison:
    """What a reference function returns: the parts to compare, and a description of what
    was checked (it opens the result's ``detail``)."""

    parts: Sequence[Part]
    detail: Mapping[str, Any] = field(default_factory=dict)


Reference = Callable[[Mapping[str, Any], Mapping[str, Any]], Comparison]


def whole(outputs: Mapping[str, Any], refs: Mapping[str, np.ndarray]) -> Comparison:
    """Every reference output against the candidate's whole output of the same name."""
    return Comparison([Part(n, outputs.get(n), r) for n, r in refs.items()])


def _changed(out: Any, ref: Any) -> tuple[int, int]:
    """(elements whose bit patterns differ, the first of them) of two arrays of one dtype."""
    if out.dtype != ref.dtype or tuple(out.shape) != tuple(ref.shape):
        return int(ref.size), 0
    words = np.dtype(f"u{ref.dtype.itemsize}")
    differ = out.reshape(-1).view(words) != ref.reshape(-1).view(words)
    n = int(differ.sum())
    return n, (int(differ.argmax()) if n else 0)


class OracleChecker:
    """The outputs against ``reference(outputs, inputs)`` under the scale-invariant bound
    ``tolerance`` (module docstring); ``seed``: the inputs' (recorded in the result)."""

    def __init__(self, reference: Reference, tolerance: float, *,
                 seed: int | None = None) -> None:
        self.reference = reference
        self.tolerance = float(tolerance)
        self.seed = seed

    def check(self, outputs: Mapping[str, Any],
              inputs: Mapping[str, Any] | None = None) -> CheckResult:
        cmp = self.reference(outputs, inputs or {})
        diff, scale, points = 0.0, 0.0, 0
        parts: dict[str, float | None] = {}
        exact: dict[str, int | None] = {}
        changed_at: str | None = None
        worst, worst_at = -1.0, None
        bad = None
        for p in cmp.parts:
            if p.exact:  # no arrays: not checked here (reported as None)
                n, first = (None, 0) if p.out is None else _changed(p.out, p.ref)
                prior = exact.get(p.name)
                exact[p.name] = n if prior is None else prior + (n or 0)
                if n and changed_at is None:
                    changed_at = _at(p.name, first, tuple(p.ref.shape))
                continue
            if p.out is None or np.shape(p.out) != np.shape(p.ref):
                got = None if p.out is None else np.shape(p.out)
                bad = f"{p.name}: shape {got} differs from the reference's {np.shape(p.ref)}"
                parts[p.name] = None
                continue
            o = np.asarray(p.out, dtype=np.float64)
            r = np.asarray(p.ref, dtype=np.float64)
            with np.errstate(invalid="ignore", over="ignore"):
                gap = np.abs(o - r)
            gap[~np.isfinite(o) | np.isnan(gap)] = np.inf
            d = float(gap.max()) if o.size else 0.0
            diff = max(diff, d)
            scale = max(scale, float(np.max(np.abs(r))) if r.size else 0.0)
            points += int(o.size)
            parts[p.name] = d if np.isfinite(d) else None
            if o.size and d > worst:
                worst, worst_at = d, _at(p.name, int(gap.argmax()), o.shape)
        error = 0.0 if diff == 0.0 else (diff / scale if scale > 0 else float("inf"))
        if bad is not None:
            error = float("inf")
        ok = bad is None and error <= self.tolerance and not any(exact.values())
        detail = {**cmp.detail, "max_abs": diff if np.isfinite(diff) else None,
                  "max_ref": scale, "parts": parts, **exact}
        if bad is not None:
            detail["mismatch"] = bad
        where = changed_at or (bad and bad.split(":")[0]) or (worst_at if error > 0 else None)
        return CheckResult(ok, error, self.tolerance, points, self.seed, detail, where)
