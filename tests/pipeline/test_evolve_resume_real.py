"""kill -9 in the middle of an evolution run whose evaluations are real (compiled, verified,
tuned and timed on the CPU heat example; no memo), then resume.

Real timings differ from run to run, so the reference is not a second real run but an
uninterrupted run fed the killed run's own evaluation results: the resumed run must end with
the same programs, cells and iterations as that, every evaluation finished before the kill must
be kept as it was, the one in flight at the kill is quarantined (RUNTIME_FAILED, issue 29),
and no program may be evaluated twice. (test_evolve.py has the memoized
variant, where both runs see identical results from the start.)"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kernforge.evolve.store import Store
from kernforge.llm.fake_server import FakeLLMServer
from kernforge.pipeline.evolve import evolve_kernel
from kernforge.pipeline.evolve_eval import make_evolve_evaluator
from kernforge.record import find_recordings, load_recording

from .evolve_helpers import (
    kill_child_mid_run,
    llm_config,
    replaying,
    scripted_reply,
    stored_results,
)
from .test_evolve import _population

ITERS = 12


def _evaluations(db: Path) -> dict[str, tuple]:
    with Store(db) as s:
        rows = s.conn.execute("SELECT program_id, status, fitness, config, extra, finished "
                              "FROM evaluations").fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


@pytest.mark.slow
def test_kill9_with_real_evaluations_resumes_without_repeating_any(
        heat_recordings: Path, tmp_path: Path) -> None:
    recs = [load_recording(p) for p in find_recordings(heat_recordings)]
    run_dir = tmp_path / "killed"
    db = run_dir / "evolve.db"
    with FakeLLMServer(scripted_reply, latency=0.05) as srv:
        kill_child_mid_run(heat_recordings, run_dir, "-", srv.base_url, ITERS, "0.1")
        with Store(db) as s:
            applied = s.get_state("next_apply")
            started = {e["program_id"] for e in s.events("evaluation_started")}
        before = _evaluations(db)
        in_flight = started - set(before)
        assert 0 < applied < ITERS and len(before) >= 4
        assert all(e[4] and '"eval_s"' in e[3] for e in before.values())  # measured here
        resumed = evolve_kernel(recs, llm_config(srv.base_url, ITERS), run_dir, resume=True,
                                evaluate=make_evolve_evaluator(recs, inner_trials=2, repeat=3),
                                validate_winner=False)
        assert resumed.result.iterations == ITERS
        after = _evaluations(db)
        assert {k: after[k] for k in before} == before  # kept, not evaluated again
        with Store(db) as s:
            per_program = Counter(e["program_id"] for e in s.events("evaluation_finished"))
        assert max(per_program.values()) == 1, per_program
        for pid in in_flight:  # in flight at the kill: quarantined, not run again
            assert after[pid][0] == "RUNTIME_FAILED"
        assert resumed.result.evaluations == len(per_program) - len(before) - len(in_flight)
        ref = evolve_kernel(recs, llm_config(srv.base_url, ITERS), tmp_path / "ref",
                            evaluate=replaying(stored_results(db)), validate_winner=False)
    assert ref.result.iterations == ITERS
    assert _population(db) == _population(tmp_path / "ref" / "evolve.db")
