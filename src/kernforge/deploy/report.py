"""What a deployment did: per kernel, launches replaced and launches that ran the original."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class KernelCounts:
    """Launches of one kernel: ``replaced`` ran the tuned variant, ``fallback`` the original
    (``reasons``: fallback category -> launches)."""

    replaced: int = 0
    fallback: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"replaced": self.replaced, "fallback": self.fallback,
                "reasons": dict(self.reasons)}


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

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec, "replaced": self.replaced, "fallback": self.fallback,
                "kernels": {k: c.to_json() for k, c in sorted(self.kernels.items())}}

    def lines(self) -> list[str]:
        """One line per kernel, e.g. ``heat_step: 20 replaced, 0 fallback``."""
        out = []
        for name, c in sorted(self.kernels.items()):
            why = ", ".join(f"{r}: {n}" for r, n in sorted(c.reasons.items()))
            out.append(f"{name}: {c.replaced} replaced, {c.fallback} fallback"
                       + (f" ({why})" if why else ""))
        return out
