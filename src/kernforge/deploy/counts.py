"""What a deployment did: per kernel, launches replaced and launches that ran the original."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class KernelCounts:
    """Launches of one kernel: ``replaced`` ran the tuned variant, ``fallback`` the original
    (``reasons``: fallback category -> launches). ``verified``: launches that re-verified an
    entry (deploy/reverify.py: the tuned variant ran on a copy of the arguments and agreed
    with the original, which ran on the arguments themselves); neither a replacement nor a
    fallback, once per entry and process. A re-verification that fails is a fallback
    (reason ``re-verification``)."""

    replaced: int = 0
    fallback: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    verified: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"replaced": self.replaced, "verified": self.verified,
                "fallback": self.fallback, "reasons": dict(self.reasons)}


@dataclass(frozen=True)
class DeployReport:
    spec: str
    kernels: dict[str, KernelCounts]

    @property
    def replaced(self) -> int:
        return sum(c.replaced for c in self.kernels.values())

    @property
    def fallback(self) -> int:
        return sum(c.fallback for c in self.kernels.values())

    @property
    def verified(self) -> int:
        return sum(c.verified for c in self.kernels.values())

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec, "replaced": self.replaced, "verified": self.verified,
                "fallback": self.fallback,
                "kernels": {k: c.to_json() for k, c in sorted(self.kernels.items())}}

    def lines(self) -> list[str]:
        """One line per kernel, e.g. ``heat_step: 19 replaced, 1 re-verification run, 0
        fallback`` (the re-verification part only when there was one)."""
        out = []
        for name, c in sorted(self.kernels.items()):
            why = ", ".join(f"{r}: {n}" for r, n in sorted(c.reasons.items()))
            checked = f", {c.verified} re-verification run" if c.verified else ""
            out.append(f"{name}: {c.replaced} replaced{checked}, {c.fallback} fallback"
                       + (f" ({why})" if why else ""))
        return out
