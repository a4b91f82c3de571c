"""M3 integration strategies: one file each, one small ABC, one registry line each.

A strategy gets the application (manifest, harness, run directory) and what M2 found (the
kernels, their shares, their units) and returns an :class:`Outcome`: ``DONE`` with what it
adds to the integration (native or source-level deployment specs, or a changed copy of the
source), ``FAILED`` (it ran and found nothing) or ``SKIPPED`` (it could not apply), always
with the reason and its figures. The workflow tries them in the manifest's order (default:
operator, tune, agent) and persists each as its own milestone (M3a, M3b, M3c).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.registry import Registry
from ..harness import AppHarness
from ..manifest import Manifest


@dataclass(frozen=True)
class Outcome:
    status: str  # DONE, FAILED, SKIPPED
    reason: str
    figures: dict[str, Any] = field(default_factory=dict)
    native_specs: tuple[str, ...] = ()  # deploy/native.py specs to deploy
    source_specs: tuple[str, ...] = ()  # deploy/spec.py specs to deploy
    source: str | None = None  # a changed copy of the program's source to run instead

    @property
    def integrates(self) -> bool:
        return self.status == "DONE" and bool(self.native_specs or self.source_specs
                                              or self.source)

    def to_json(self) -> dict[str, Any]:
        return {**self.figures, "native_specs": list(self.native_specs),
                "source_specs": list(self.source_specs), "source": self.source}

    @classmethod
    def from_json(cls, status: str, reason: str, d: dict[str, Any]) -> Outcome:
        figures = {k: v for k, v in d.items()
                   if k not in ("native_specs", "source_specs", "source")}
        return cls(status, reason, figures, tuple(d.get("native_specs") or ()),
                   tuple(d.get("source_specs") or ()), d.get("source"))


def candidate_kernels(kernels: list[dict[str, Any]], min_share: float, limit: int = 8
                      ) -> list[dict[str, Any]]:
    """M2's kernels that M3 works on (:meth:`Context.candidates`)."""
    least = min(0.01, min_share)
    ks = [k for k in kernels if k["units"]]
    if any(k.get("share") is not None for k in ks):
        ks = [k for k in ks if (k.get("share") or 0.0) >= least]
    return ks[:limit]


@dataclass
class Context:
    manifest: Manifest
    harness: AppHarness
    out: Path
    kernels: list[dict[str, Any]]  # M2: per kernel name, seen, total_ms, share, units, kind
    run_s: float  # M1: the recorded dataset's median run time
    earlier: dict[str, Outcome]  # the strategies tried before this one, by name
    progress: Callable[[str], None] = lambda s: None
    agent: str | None = None  # the agent command (the manifest's, or the command line's)

    def candidates(self, limit: int = 8) -> list[dict[str, Any]]:
        """Kernels with units, hottest first, that take at least 1 % of the run (or the
        manifest's ``min_share``, when lower); all of them when no time was measured."""
        return candidate_kernels(self.kernels, self.manifest.measure.min_share, limit)

    def units(self) -> list[tuple[dict[str, Any], Path]]:
        """(kernel, unit) of every candidate kernel: one unit per recorded dataset, since a
        replacement applies to the problem it was made for (sizes, scalars)."""
        return [(k, Path(u)) for k in self.candidates() for u in k["units"]]


class Strategy(ABC):
    """One way of integrating kernforge's work into the unchanged program."""

    milestone: str = "M3?"
    title: str = ""
    resumable: bool = False  # keeps what a stopped attempt finished (its workdir not emptied)

    @classmethod
    def workdir(cls, out: Path) -> Path:
        """Where it writes in the run directory (``OUT/m3a``, ...). The workflow empties it
        before the strategy starts: a strategy redone after an interrupted run starts from
        scratch, not on what the interrupted attempt left (a tuning study, a half copy);
        one that is ``resumable`` is given it as it is and keeps what was finished."""
        return out / cls.milestone.lower()

    @abstractmethod
    def apply(self, ctx: Context) -> Outcome:
        """Try it; never raises for a failure of the program or the tools (that is data)."""


strategies: Registry[type[Strategy]] = Registry("integration strategy")
strategies.register("operator", "kernforge.apps.strategies.operator:OperatorStrategy")
strategies.register("tune", "kernforge.apps.strategies.tune:TuneStrategy")
strategies.register("agent", "kernforge.apps.strategies.agent:AgentStrategy")
