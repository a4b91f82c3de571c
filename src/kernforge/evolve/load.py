"""The evaluators' load as the controller sees it, for runtime-aware model choice.

The controller owns one :class:`LoadTracker` per run and reports to it: candidates queued for
an evaluator, evaluations started and finished (their wall times give the evaluation-time
estimate), proposals started and finished. LLM proposers report their requests in flight per
model. ``snapshot()`` turns that into a :class:`kernforge.llm.scheduler.Load`, which
``LLMProposer`` hands to its scheduler when runtime-aware mode is on.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from ..llm.scheduler import Load

T = TypeVar("T")


class LoadTracker:
    """Thread-safe. ``eval_time_s`` seeds the estimate until an evaluation finishes; after
    that it is an EWMA (``alpha``) of finished evaluations' wall times."""

    def __init__(self, evaluators: int, *, eval_time_s: float = 0.0, alpha: float = 0.3,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.evaluators = evaluators
        self.eval_time_s = eval_time_s
        self.alpha = alpha
        self.clock = clock
        self._lock = threading.Lock()
        self._queued: set[int] = set()
        self._running: dict[int, float] = {}  # key -> start time
        self._observed = 0
        self.proposals = 0  # proposals in flight
        self._llm: Counter[str] = Counter()

    # -- evaluations ---------------------------------------------------------------------------
    def eval_queued(self, key: int) -> None:
        with self._lock:
            self._queued.add(key)

    def eval_started(self, key: int) -> None:
        with self._lock:
            self._queued.discard(key)
            self._running[key] = self.clock()

    def eval_finished(self, key: int) -> None:
        with self._lock:
            start = self._running.pop(key, None)
            if start is not None:
                self._observe(self.clock() - start)

    def observe_eval(self, seconds: float) -> None:
        """Learn from an evaluation timed elsewhere (the seed's)."""
        with self._lock:
            self._observe(seconds)

    def _observe(self, seconds: float) -> None:
        if self._observed == 0:
            self.eval_time_s = seconds
        else:
            self.eval_time_s = (1 - self.alpha) * self.eval_time_s + self.alpha * seconds
        self._observed += 1

    def timed(self, key: int, fn: Callable[[str], T]) -> Callable[[str], T]:
        """``fn`` wrapped so that it reports start and finish under ``key`` (runs in the
        evaluator thread, so queueing in the pool counts as queued)."""
        def run(code: str) -> T:
            self.eval_started(key)
            try:
                return fn(code)
            finally:
                self.eval_finished(key)
        return run

    # -- proposals and LLM requests --------------------------------------------------------------
    def proposal_started(self) -> None:
        with self._lock:
            self.proposals += 1

    def proposal_finished(self) -> None:
        with self._lock:
            self.proposals -= 1

    def llm_started(self, model: str) -> None:
        with self._lock:
            self._llm[model] += 1

    def llm_finished(self, model: str) -> None:
        with self._lock:
            self._llm[model] -= 1
            if self._llm[model] <= 0:
                del self._llm[model]

    def llm_in_flight(self) -> dict[str, int]:
        with self._lock:
            return dict(self._llm)

    # -- the view ----------------------------------------------------------------------------------
    @property
    def busy(self) -> int:
        with self._lock:
            return len(self._running)

    @property
    def idle(self) -> int:
        return max(0, self.evaluators - self.busy)

    def snapshot(self) -> Load:
        with self._lock:
            now, est = self.clock(), self.eval_time_s
            busy = tuple(sorted(max(0.0, s + est - now) for s in self._running.values()))
            return Load(evaluators=self.evaluators, queued=len(self._queued),
                        eval_time_s=est, busy_until=busy)

    def __call__(self) -> Load:
        return self.snapshot()
