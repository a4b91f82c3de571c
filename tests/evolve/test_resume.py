"""kill -9 in the middle of a run, then resume: the run completes, the evaluations that were in
flight are quarantined (RUNTIME_FAILED, not run again), nothing finished is re-evaluated."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from kernforge.core import Status
from kernforge.evolve.config import EvolveConfig
from kernforge.evolve.controller import run
from kernforge.evolve.store import QUARANTINED, Store
from kernforge.testing.runs import finished_evaluations

from .evolve_fakes import SEED_CODE, HashEvaluator, OfflineEditProposer

ROOT = Path(__file__).resolve().parents[2]
ITERS = 30


def _config() -> EvolveConfig:
    return EvolveConfig.from_dict({"seed": 7, "max_iterations": ITERS, "eval_slots": 2,
                                   "llm_slots": 2, "mapelites": {"migration_interval": 5}})


def _snapshot(path: Path) -> tuple[list, dict, list]:
    with Store(path) as s:
        progs = [(p.id, p.code, p.parent_id, p.island, p.generation, p.fitness, p.status,
                  p.features) for p in s.programs()]
        outcomes = [(it["iteration"], it["outcome"], it["parent_id"]) for it in s.iterations()]
        return progs, s.cells(), outcomes


def test_kill9_then_resume_quarantines_what_was_in_flight(tmp_path):
    db = tmp_path / "killed.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen([sys.executable, "-m", "tests.evolve._resume_child", str(db),
                              str(ITERS), "0.05"], cwd=ROOT, env=env)
    deadline = time.monotonic() + 30
    while finished_evaluations(db) < 8 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert child.poll() is None, "the child finished before it could be killed"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()

    with Store(db) as s:
        applied_before = s.get_state("next_apply")
        started = {e["program_id"] for e in s.events("evaluation_started")}
        finished = {e["program_id"] for e in s.events("evaluation_finished")}
    assert 0 < applied_before < ITERS
    assert started - finished, "no evaluation was in flight at the kill"

    ev = HashEvaluator()
    r = run(_config(), OfflineEditProposer(), ev, db, initial_code=SEED_CODE)
    assert r.iterations == ITERS
    in_flight = started - finished
    with Store(db) as s:
        per_program = Counter(e["program_id"] for e in s.events("evaluation_finished"))
        assert max(per_program.values()) == 1  # nothing evaluated twice
        progs = {p.id: p for p in s.programs()}
        for pid in in_flight:  # quarantined: recorded as failed, never handed to the evaluator
            assert progs[pid].status is Status.RUNTIME_FAILED
            row = s.conn.execute("SELECT message FROM evaluations WHERE program_id=?",
                                 (pid,)).fetchone()
            assert row[0] == QUARANTINED
        assert _snapshot(db)[0]  # the population is readable and complete
    assert len(ev.calls) == len(per_program) - len(finished) - len(in_flight)
    assert not set(ev.calls) & {progs[p].code for p in in_flight}


def test_kill9_then_an_isolated_resume_evaluates_what_was_in_flight(tmp_path):
    """Candidates evaluated in a child process (a native unit's) cannot take the run down:
    what was in flight at the kill was stopped by the run's end, and is evaluated again."""
    db = tmp_path / "killed.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.Popen([sys.executable, "-m", "tests.evolve._resume_child", str(db),
                              str(ITERS), "0.05"], cwd=ROOT, env=env)
    deadline = time.monotonic() + 30
    while finished_evaluations(db) < 8 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert child.poll() is None, "the child finished before it could be killed"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    with Store(db) as s:
        started = {e["program_id"] for e in s.events("evaluation_started")}
        finished = {e["program_id"] for e in s.events("evaluation_finished")}
    in_flight = started - finished
    assert in_flight, "no evaluation was in flight at the kill"

    ev = HashEvaluator()
    r = run(_config(), OfflineEditProposer(), ev, db, initial_code=SEED_CODE, isolated=True)
    assert r.iterations == ITERS
    with Store(db) as s:
        per_program = Counter(e["program_id"] for e in s.events("evaluation_finished"))
        assert max(per_program.values()) == 1  # nothing evaluated twice
        progs = {p.id: p for p in s.programs()}
        quarantined = s.conn.execute("SELECT count(*) FROM evaluations WHERE message=?",
                                     (QUARANTINED,)).fetchone()[0]
    assert quarantined == 0
    assert {progs[p].code for p in in_flight if p in progs} <= set(ev.calls)
    assert len(ev.calls) == len(per_program) - len(finished)
