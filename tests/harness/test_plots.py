"""The charts (issue 32, item 4): one point per evaluation, cache hits not drawn, the
recorded configuration at its measured median, every evolved program per island."""

from __future__ import annotations

from pathlib import Path

from kernforge.core import Measurement, Status
from kernforge.harness.plots import evolution_png, tuning_png
from kernforge.replay.tuning import history_points
from kernforge.tune import TrialRecord, TuneResult


def _trial(n: int, origin: str, median: float | None, status: Status = Status.OK
           ) -> TrialRecord:
    m = Measurement(status, samples=(median,) * 3 if median else ())
    return TrialRecord(n, {"x": n}, m, origin=origin)


def test_cache_hits_are_not_evaluations(tmp_path: Path) -> None:
    trials = [_trial(0, "evaluated", 2e-3), _trial(1, "cached", 2e-3),
              _trial(2, "evaluated", None, Status.COMPILE_FAILED), _trial(3, "cached", 2e-3),
              _trial(4, "evaluated", 1e-3)]
    study = TuneResult(tuple(trials), trials[4], trials[0], "trials", 3, "u", None)
    points, hits = history_points(study)
    assert points == [(1, 2e-3), (2, None), (3, 1e-3)] and hits == 2
    png = tuning_png(tmp_path / "h.png", points, recorded_s=2e-3, cache_hits=hits,
                     title="u: interleaved speedup 1.9x [1.8, 2.0]")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evolution_chart_draws_every_program(tmp_path: Path) -> None:
    points = [(float(t), 1e-4 / (1 + t % 3) if t % 4 else None, t % 2) for t in range(20)]
    png = evolution_png(tmp_path / "e.png", points, seed_s=1e-4, title="evolution of k")
    assert png.stat().st_size > 5000
