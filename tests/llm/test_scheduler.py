"""Runtime-aware model selection: backfill decisions and weighted draws."""

from __future__ import annotations

from collections import Counter

import pytest

from kernforge.core import ConfigError
from kernforge.llm import Load, Scheduler
from kernforge.llm.scheduler import demand


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _sched(clock: Clock, **kw: object) -> Scheduler:
    return Scheduler({"fast": 0.6, "medium": 0.3, "slow": 0.1},
                     latency_s={"fast": 1.0, "medium": 4.0, "slow": 12.0}, clock=clock,
                     **kw)  # type: ignore[arg-type]


def test_weighted_draws_follow_weights() -> None:
    s = _sched(Clock(), seed=1)
    counts = Counter(s.choose().model for _ in range(3000))
    assert counts["fast"] / 3000 == pytest.approx(0.6, abs=0.04)
    assert counts["slow"] / 3000 == pytest.approx(0.1, abs=0.03)
    assert s.backfills == 0


def test_backfill_when_slow_pending_and_evaluators_idle() -> None:
    clock = Clock()
    s = _sched(clock)
    s.begin("slow")
    idle = Load(evaluators=4, queued=0, eval_time_s=2.0)
    d = s.choose(idle)
    assert d.backfill and d.model == "fast"
    # enough work queued: follow the weights
    busy = Load(evaluators=4, queued=10, eval_time_s=2.0, busy_until=(0.5, 0.5, 0.5, 0.5))
    assert not s.would_idle(busy)


def test_no_backfill_without_a_slow_pending_reply() -> None:
    s = _sched(Clock())
    assert not s.would_idle(Load(evaluators=4, queued=0, eval_time_s=2.0))
    s.begin("fast")
    assert not s.would_idle(Load(evaluators=4, queued=0, eval_time_s=2.0))


def test_slow_reply_about_to_arrive_counts_as_work() -> None:
    clock = Clock()
    s = _sched(clock)
    s.begin("slow")
    clock.t = 11.5  # arrives within the fast model's latency
    load = Load(evaluators=1, queued=0, eval_time_s=5.0, busy_until=(0.8,))
    assert not s.would_idle(load)


def test_ewma_learns_latency() -> None:
    clock = Clock()
    s = _sched(clock, alpha=0.5)
    t = s.begin("fast")
    clock.t = 5.0
    s.end(t)
    assert s.estimate["fast"] == pytest.approx(3.0)
    assert s.fastest == "fast"
    s.observe("fast", 9.0)
    assert s.fastest == "medium"


def test_demand_counts_repeated_evaluations() -> None:
    assert demand(Load(evaluators=2, queued=0, eval_time_s=1.0), 2.5) == 6
    assert demand(Load(evaluators=2, queued=0, eval_time_s=1.0, busy_until=(3.0,)), 2.5) == 3


def test_rejects_empty_weights() -> None:
    with pytest.raises(ConfigError):
        Scheduler({"a": 0.0})
