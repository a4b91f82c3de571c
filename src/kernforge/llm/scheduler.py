"""Runtime-aware model selection.

Each model has a latency estimate (an EWMA of observed latencies, seeded from config). The
caller says how busy its evaluators are (:class:`Load`). When a slow model's reply is pending
and the evaluators would sit idle before enough replies arrive, the scheduler fills the gap
with the fastest model (*backfill*); otherwise it draws from the ensemble weights.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..core import ConfigError


@dataclass(frozen=True)
class Load:
    """The evaluators' state when a model is chosen.

    ``evaluators``: how many evaluate in parallel; ``busy_until``: for each busy evaluator,
    the seconds until it finishes (estimate); ``queued``: candidates waiting for an evaluator;
    ``eval_time_s``: the estimated time of one evaluation."""

    evaluators: int
    queued: int
    eval_time_s: float
    busy_until: tuple[float, ...] = ()


@dataclass(frozen=True)
class Decision:
    model: str
    backfill: bool
    ticket: int


def demand(load: Load, horizon: float) -> int:
    """How many candidates the evaluators take within ``horizon`` seconds if always fed."""
    busy = list(load.busy_until)[: load.evaluators]
    starts = [0.0] * (load.evaluators - len(busy)) + busy
    total = 0
    for b in starts:
        if b <= horizon:
            total += 1 + (int((horizon - b) // load.eval_time_s) if load.eval_time_s > 0 else 0)
    return total


class Scheduler:
    """Chooses the model of the next request. Thread-safe.

    ``begin(model)``/``end(ticket, latency_s)`` bracket every request so the scheduler knows
    what is pending and learns latencies; ``choose(load)`` does both selection and ``begin``.
    """

    def __init__(self, weights: Mapping[str, float], *,
                 latency_s: Mapping[str, float] | None = None, alpha: float = 0.3,
                 seed: int = 0, clock: Callable[[], float] = time.monotonic,
                 runtime_aware: bool = True) -> None:
        total = sum(weights.values())
        if not weights or total <= 0:
            raise ConfigError("the scheduler needs at least one model with a positive weight",
                              hint="set llm.models[*].weight")
        self.weights = {m: w / total for m, w in weights.items()}
        self.estimate = {m: float((latency_s or {}).get(m, 30.0)) for m in weights}
        self.alpha = alpha
        self.runtime_aware = runtime_aware
        self.clock = clock
        self._rng = random.Random(seed)
        self._pending: dict[int, tuple[str, float]] = {}
        self._tickets = itertools.count()
        self._lock = threading.Lock()
        self.backfills = 0

    @property
    def fastest(self) -> str:
        return min(self.estimate, key=lambda m: self.estimate[m])

    def observe(self, model: str, latency_s: float) -> None:
        with self._lock:
            old = self.estimate.get(model, latency_s)
            self.estimate[model] = (1 - self.alpha) * old + self.alpha * latency_s

    def begin(self, model: str) -> int:
        with self._lock:
            ticket = next(self._tickets)
            self._pending[ticket] = (model, self.clock())
            return ticket

    def end(self, ticket: int, latency_s: float | None = None) -> None:
        with self._lock:
            model, start = self._pending.pop(ticket, ("", 0.0))
        if model:
            self.observe(model, self.clock() - start if latency_s is None else latency_s)

    def _remaining(self, now: float) -> list[tuple[str, float]]:
        return [(m, max(0.0, s + self.estimate[m] - now)) for m, s in self._pending.values()]

    def would_idle(self, load: Load) -> bool:
        """True when a slower reply is pending and, within the fastest model's latency, fewer
        candidates arrive than evaluators become free: a fast request would fill that gap."""
        fast = self.fastest
        horizon = self.estimate[fast]
        with self._lock:
            remaining = self._remaining(self.clock())
        slow_pending = any(m != fast and r > horizon for m, r in remaining)
        if not slow_pending:
            return False
        arriving = sum(1 for _, r in remaining if r <= horizon)
        return load.queued + arriving < demand(load, horizon)

    def draw(self, u: float | None = None) -> str:
        """A model by weight; ``u`` in [0, 1) is the caller's uniform draw (for a choice that
        depends on the caller's seed, not on the order of concurrent calls)."""
        if u is not None:
            r = u
        else:
            with self._lock:
                r = self._rng.random()
        acc = 0.0
        for m, w in self.weights.items():
            acc += w
            if r < acc:
                return m
        return next(reversed(self.weights))

    def choose(self, load: Load | None = None, *, u: float | None = None) -> Decision:
        """Pick a model for the next request and mark it pending (``u``: see :meth:`draw`)."""
        backfill = bool(self.runtime_aware and load is not None and self.would_idle(load))
        model = self.fastest if backfill else self.draw(u)
        if backfill:
            self.backfills += 1
        return Decision(model=model, backfill=backfill, ticket=self.begin(model))
