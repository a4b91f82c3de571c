"""The sampler ABC: a sampler proposes configurations (ask) and learns their results (tell).

Shared work -- caching duplicates, constraint checks, banning launch shapes, the budget,
parallel evaluators -- lives in :func:`kernforge.tune.tune`, not in samplers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from ...core import Measurement, Status
from ..space import SearchSpace

# How a trial got its result: evaluated, answered from the cache (a duplicate), refused by a
# constraint, or refused because its launch shape already failed to launch.
ORIGINS = ("evaluated", "cached", "invalid", "banned")


@dataclass(frozen=True)
class Trial:
    """A configuration the sampler asked for; ``number`` is its place in the study."""

    number: int
    config: dict[str, Any]


@dataclass(frozen=True)
class TrialRecord:
    """A finished trial: the configuration, its measurement, and how it was obtained."""

    number: int
    config: dict[str, Any]
    measurement: Measurement
    origin: str = "evaluated"
    seconds: float = 0.0  # wall time of the evaluation; 0 when nothing was evaluated

    @property
    def status(self) -> Status:
        return self.measurement.status

    @property
    def ok(self) -> bool:
        return self.measurement.ok and bool(self.measurement.samples)

    @property
    def median(self) -> float | None:
        """Median time in seconds, ``None`` unless the trial succeeded (no magic values)."""
        return self.measurement.median if self.ok else None

    @property
    def message(self) -> str:
        return self.measurement.message

    @property
    def cached(self) -> bool:
        return self.origin == "cached"

    @property
    def evaluated(self) -> bool:
        return self.origin == "evaluated"


class Sampler(ABC):
    """Proposes points of ``space``; a study named ``study_name`` in ``storage`` (an Optuna
    storage URL such as ``sqlite:///run/study.db``; ``None`` = in memory) persists them.

    A new study starts with the space's baseline as trial 0. Opening an existing study resumes
    it: :meth:`history` returns its finished trials.
    """

    #: True for a sampler that proposes every valid point exactly once, then stops.
    visits_all: ClassVar[bool] = False

    def __init__(self, space: SearchSpace, *, storage: str | None = None,
                 study_name: str = "kernforge", seed: int | None = None) -> None:
        self.space = space
        self.storage = storage
        self.study_name = study_name
        self.seed = seed

    @abstractmethod
    def history(self) -> list[TrialRecord]:
        """Trials finished before this sampler was opened (resume), by trial number."""

    @abstractmethod
    def ask(self) -> Trial | None:
        """The next configuration to try, or ``None`` when the sampler has no point left."""

    @abstractmethod
    def tell(self, trial: Trial, measurement: Measurement, *, origin: str = "evaluated",
             seconds: float = 0.0) -> TrialRecord:
        """Record the result of ``trial`` (any Status; only OK times count as objective)."""
