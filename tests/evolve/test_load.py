"""Runtime-aware model choice inside a controller run: the controller's LoadTracker feeds the
LLM proposer's scheduler, which backfills with the fast model while a slow reply is pending."""

from __future__ import annotations

import itertools
import random
import threading
from typing import Any

import pytest

from kernforge.evolve.config import EvolveConfig
from kernforge.evolve.controller import run
from kernforge.evolve.load import LoadTracker
from kernforge.evolve.proposers import make_proposer
from kernforge.evolve.store import Store
from kernforge.llm.config import LLMConfig
from kernforge.llm.fake_server import FakeLLMServer

from .evolve_fakes import SEED_CODE, HashEvaluator

LATENCY = {"fast": 0.02, "slow": 0.3}
WEIGHTS = {"fast": 0.3, "slow": 0.7}


def test_load_tracker_counts_and_estimates() -> None:
    now = [0.0]
    t = LoadTracker(2, eval_time_s=5.0, clock=lambda: now[0])
    assert t.snapshot().eval_time_s == 5.0 and t.idle == 2
    t.eval_queued(1)
    t.eval_queued(2)
    assert t.snapshot().queued == 2
    t.eval_started(1)
    now[0] = 1.0
    snap = t.snapshot()
    assert (snap.queued, snap.busy_until, t.busy, t.idle) == (1, (4.0,), 1, 1)
    t.eval_finished(1)  # took 1 s: the first observation replaces the seed estimate
    assert t.eval_time_s == 1.0 and t.busy == 0
    t.llm_started("slow")
    t.llm_started("slow")
    t.llm_finished("slow")
    assert t.llm_in_flight() == {"slow": 1}
    assert t.timed(3, lambda code: code.upper())("x") == "X"
    assert abs(t.eval_time_s - 0.7) < 1e-9  # EWMA: 0.7 * 1 s + 0.3 * 0 s


def _replies() -> Any:
    counter, lock = itertools.count(), threading.Lock()

    def reply(body: dict[str, Any]) -> str:  # a full rewrite, new code every time
        with lock:
            n = next(counter)
        code = SEED_CODE.replace("{\n", "{\n" + f"  int t{n} = {n};\n", 1)
        return f"```c\n{code}```\n"
    return reply


def _run(tmp_path: Any, name: str, runtime_aware: bool) -> tuple[list[dict[str, Any]], Any, Any]:
    """Calls, proposal spans (iteration -> started, finished) and iteration seeds of a run."""
    cfg = EvolveConfig(seed=3, max_iterations=24, eval_slots=2, llm_slots=3)
    with FakeLLMServer(_replies(), latency=LATENCY) as srv:
        llm = LLMConfig.from_mapping({"base_url": srv.base_url, "api_key_env": "KF_NO_KEY",
                                      "models": [{"name": m, "weight": WEIGHTS[m],
                                                  "timeout_s": 10 * LATENCY[m]}
                                                 for m in LATENCY]})
        proposer = make_proposer("llm", config=llm, retries=0, runtime_aware=runtime_aware)
        run(cfg, proposer, HashEvaluator(delay_s=0.15), tmp_path / name,
            initial_code=SEED_CODE)
    with Store(tmp_path / name) as store:
        start = {e["iteration"]: e["ts"] for e in store.events("proposal_started")}
        spans = {e["iteration"]: (start[e["iteration"]], e["ts"])
                 for e in store.events("proposal_finished")}
        seeds = {it["iteration"]: it["seed"] for it in store.iterations()}
        return store.llm_calls(), spans, seeds


@pytest.mark.slow
def test_runtime_aware_run_backfills_with_the_fast_model(tmp_path: Any) -> None:
    calls, span, _ = _run(tmp_path, "aware.db", runtime_aware=True)
    assert len(calls) == 24 and all(c["error"] is None for c in calls)
    backfills = [c for c in calls if c["backfill"]]
    assert backfills, "no backfill decision recorded"
    assert all(c["model"] == "fast" for c in backfills)
    slow = [span[c["iteration"]] for c in calls if c["model"] == "slow"]
    for c in backfills:  # each backfill ran while some slow reply was pending
        s, f = span[c["iteration"]]
        assert any(s0 < f and f0 > s for s0, f0 in slow)


@pytest.mark.slow
def test_runtime_aware_off_draws_by_weight_from_the_iteration_seed(tmp_path: Any) -> None:
    calls, _, seeds = _run(tmp_path, "weighted.db", runtime_aware=False)
    assert len(calls) == 24 and not any(c["backfill"] for c in calls)
    for c in calls:
        u = random.Random(seeds[c["iteration"]]).random()
        assert c["model"] == ("fast" if u < WEIGHTS["fast"] else "slow")
    # A second run makes the same per-iteration choice from each iteration's seed. (Whole runs
    # are not compared: the scripted server numbers its replies in arrival order, so programs,
    # and with them later seeds, may differ between runs.)
    again, _, seeds2 = _run(tmp_path, "weighted2.db", runtime_aware=False)
    for c in again:
        u = random.Random(seeds2[c["iteration"]]).random()
        assert c["model"] == ("fast" if u < WEIGHTS["fast"] else "slow")
