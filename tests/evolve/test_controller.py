from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from kernforge.core import ConfigError, Status
from kernforge.evolve.config import EvolveConfig
from kernforge.evolve.controller import run
from kernforge.evolve.store import Store
from kernforge.evolve.types import EvalResult, Proposal, ProposalRequest, Proposer

from .evolve_fakes import SEED_CODE, HashEvaluator, OfflineEditProposer


class ScriptedProposer(Proposer):
    """Returns the scripted codes in order of iteration."""

    def __init__(self, codes: dict[int, str | None]) -> None:
        self.codes = codes

    def propose(self, request: ProposalRequest) -> Proposal:
        code = self.codes.get(request.iteration)
        return Proposal(code=code, model="script", error=None if code else "no reply")


def test_run_records_everything(tmp_path):
    cfg = EvolveConfig(seed=1, max_iterations=40, mapelites=EvolveConfig().mapelites)
    ev, seen = HashEvaluator(), []
    r = run(cfg, OfflineEditProposer(), ev, tmp_path / "r.db", initial_code=SEED_CODE,
            on_progress=seen.append)
    assert r.iterations == 40 and r.stop_reason == "max_iterations"
    assert [p.iteration for p in seen] == list(range(40))
    with Store(tmp_path / "r.db") as s:
        outcomes = Counter(it["outcome"] for it in s.iterations())
        assert outcomes["noop"] > 0 and outcomes["duplicate"] > 0 and outcomes["evaluated"] > 0
        assert len(s.llm_calls()) == 40
        assert len(s.events("evaluation_finished")) == r.evaluations == len(ev.calls)
        assert len(set(ev.calls)) == len(ev.calls)  # duplicates never reach the evaluator
        assert len(s.events("migration")) > 0  # iterations 20 and 40
        assert s.events("new_best")
    with pytest.raises(ConfigError, match="already holds"):
        run(cfg, OfflineEditProposer(), ev, tmp_path / "r.db", initial_code=SEED_CODE,
            resume=False)


def test_early_rejection(tmp_path):
    codes = {0: SEED_CODE + "\n// only a comment\n", 1: "int a;", 2: "int a ;  // same",
             3: None, 4: SEED_CODE.replace("  ", "    ")}
    ev = HashEvaluator()
    cfg = EvolveConfig(max_iterations=5, eval_slots=1, llm_slots=1)
    run(cfg, ScriptedProposer(codes), ev, tmp_path / "r.db", initial_code=SEED_CODE)
    with Store(tmp_path / "r.db") as s:
        assert [it["outcome"] for it in s.iterations()] == [
            "noop", "evaluated", "duplicate", "no_code", "noop"]
    assert ev.calls == [SEED_CODE, "int a;"]


class RecordingsEvaluator:
    """Faster code that fails one recording must not become the best."""

    def __call__(self, code: str) -> EvalResult:
        from kernforge.evolve.types import RecordingResult
        fast = "fast" in code
        r1 = Status.WRONG_RESULT if fast else Status.OK
        t = 1.0 if fast else 2.0
        recs = (RecordingResult("a", Status.OK, t), RecordingResult("b", r1, t))
        return EvalResult(Status.OK, fitness=t, recordings=recs)


def test_best_requires_every_recording(tmp_path):
    codes = {0: "int fast;", 1: "int slowish;"}
    cfg = EvolveConfig(max_iterations=2, eval_slots=1, llm_slots=1)
    r = run(cfg, ScriptedProposer(codes), RecordingsEvaluator(), tmp_path / "r.db",
            initial_code="int seed;")
    fast = next(p for p in r.programs if p.code == "int fast;")
    assert fast.fitness == 1.0  # it is in the population (and its MAP-Elites cell) ...
    assert r.best is not None and r.best.fitness == 2.0  # ... but never the run's best
    assert r.best.id == "seed"  # the seed was first at 2.0; a tie is not an improvement


class BarrierProposer(Proposer):
    """Proves overlap: proposals block until an evaluation is running at the same time."""

    def __init__(self, evaluating: threading.Event) -> None:
        self.evaluating, self.overlapped = evaluating, 0
        self.inner = OfflineEditProposer()

    def propose(self, request: ProposalRequest) -> Proposal:
        if request.iteration >= 2 and self.evaluating.wait(timeout=2):
            self.overlapped += 1
        return self.inner.propose(request)


def test_proposals_overlap_evaluations(tmp_path):
    evaluating = threading.Event()
    base = HashEvaluator()

    def slow_eval(code: str) -> EvalResult:
        evaluating.set()
        time.sleep(0.02)
        return base(code)

    prop = BarrierProposer(evaluating)
    cfg = EvolveConfig(seed=2, max_iterations=12, eval_slots=2, llm_slots=2)
    run(cfg, prop, slow_eval, tmp_path / "r.db", initial_code=SEED_CODE)
    assert prop.overlapped > 0


def test_patience_and_time_stop(tmp_path):
    cfg = EvolveConfig(seed=1, max_iterations=500, patience=5)
    r = run(cfg, OfflineEditProposer(), HashEvaluator(), tmp_path / "p.db",
            initial_code=SEED_CODE)
    assert r.stop_reason == "patience" and r.iterations < 500
    cfg = EvolveConfig(seed=1, max_iterations=10_000, max_seconds=0.3)
    r = run(cfg, OfflineEditProposer(), HashEvaluator(0.01), tmp_path / "t.db",
            initial_code=SEED_CODE)
    assert r.stop_reason == "max_seconds" and r.iterations < 10_000
    cfg = EvolveConfig(seed=1, max_iterations=r.iterations + 5)  # resume tops the window up
    r2 = run(cfg, OfflineEditProposer(), HashEvaluator(), tmp_path / "t.db",
             initial_code=SEED_CODE)
    assert r2.iterations == r.iterations + 5 and r2.stop_reason == "max_iterations"


def test_resume_rejects_changed_identity(tmp_path):
    run(EvolveConfig(seed=1, max_iterations=3), OfflineEditProposer(), HashEvaluator(),
        tmp_path / "r.db", initial_code=SEED_CODE)
    with pytest.raises(ConfigError, match="seed"):
        run(EvolveConfig(seed=2, max_iterations=3), OfflineEditProposer(), HashEvaluator(),
            tmp_path / "r.db", initial_code=SEED_CODE)
