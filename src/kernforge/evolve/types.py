"""The shared vocabulary of the evolve layer: programs, proposals, proposers, evaluation results.

Everything here is frozen data or a small ABC. The store, MAP-Elites, the controller and the
proposers (LLM, command, offline) all speak these types, so each can be tested on its own.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from kernforge.core import Status


@dataclass(frozen=True)
class Program:
    """One kernel source candidate in the population.

    ``fitness`` is the best verified time in seconds after inner tuning (lower is better);
    ``None`` means the program is not valid (its ``status`` says why).
    """

    id: str
    code: str
    parent_id: str | None
    island: int
    generation: int
    fitness: float | None
    status: Status
    features: dict[str, float] = field(default_factory=dict, hash=False, compare=True)
    median_s: float | None = None
    error: float | None = None
    created: float = field(default_factory=time.time)

    @property
    def valid(self) -> bool:
        return self.status is Status.OK and self.fitness is not None


@dataclass(frozen=True)
class ProposalRequest:
    """What a proposer is asked: improve ``parent`` on ``island``, seeing ``inspirations``."""

    island: int
    parent: Program
    inspirations: tuple[Program, ...]
    contract: str  # the kernel contract text: signature, launch, what must stay true
    iteration: int = 0  # the controller's iteration number (stable across resume)
    seed: int = 0  # a per-iteration seed: a proposer that draws random numbers uses this


@dataclass(frozen=True)
class Proposal:
    """A proposer's answer. ``code`` is the full new source, or ``None`` when nothing usable
    came back (``error`` says why). ``diff_text`` is the raw reply or patch, for the log."""

    code: str | None
    diff_text: str = ""
    model: str = ""
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    error: str | None = None
    backfill: bool = False  # the (last) model was chosen by runtime-aware backfill


class Proposer(ABC):
    """Turns a :class:`ProposalRequest` into a :class:`Proposal`. Must be thread-safe: the
    controller calls ``propose`` from several threads at once."""

    @abstractmethod
    def propose(self, request: ProposalRequest) -> Proposal:
        """Return a proposal; report failures in ``Proposal.error`` rather than raising."""

    def attach_load(self, load: Any) -> None:
        """The controller hands every proposer its run's load tracker
        (:class:`kernforge.evolve.load.LoadTracker`); proposers that ignore load ignore it."""


@dataclass(frozen=True)
class RecordingResult:
    """The outcome of a candidate on one recording of its kernel."""

    name: str
    status: Status
    median_s: float | None = None
    error: float | None = None
    message: str = ""


@dataclass(frozen=True)
class EvalResult:
    """What the injected ``evaluate(code)`` returns for one source candidate.

    ``fitness`` is the best verified time after inner tuning (seconds, lower is better) or
    ``None`` when the candidate failed. ``recordings`` holds one result per recording; a
    candidate can become the run's best only when every one of them passed.
    """

    status: Status
    fitness: float | None = None
    error: float | None = None
    config: dict[str, Any] = field(default_factory=dict)
    recordings: tuple[RecordingResult, ...] = ()
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. num_regs, bytes_moved

    @property
    def passed_all(self) -> bool:
        return (self.status is Status.OK and self.fitness is not None
                and bool(self.recordings)
                and all(r.status is Status.OK for r in self.recordings))
