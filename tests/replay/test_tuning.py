"""Tuning a real CPU recording: space, verified trials, interleaved result, resume, files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import kernforge
from kernforge.core import ConfigError, Status
from kernforge.core.verdict import looks
from kernforge.harness import ABResult
from kernforge.harness.verdict import Verdict, judge
from kernforge.record import find_recordings, load_recording
from kernforge.replay.tuning import (
    TuningOutcome,
    build_space,
    history_title,
    tune_recording,
)
from kernforge.replay.validate import Validation
from kernforge.tune import Budget

SRC = r"""
#ifndef BLK
#define BLK 8
#endif
void smooth(const double *restrict x, double *restrict y, long n) {
    #pragma omp parallel for
    for (long b = 0; b < n; b += BLK)
        for (long i = b; i < b + BLK && i < n; i++)
            y[i] = 0.25 * (i > 0 ? x[i - 1] : 0.0) + 0.5 * x[i] + 0.25 * (i + 1 < n ? x[i + 1] : 0.0);
}
"""


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("tune-rec")
    k = kernforge.Kernel(SRC, "smooth", backend="cpu")
    x, y = np.random.default_rng(0).random(1 << 16), np.zeros(1 << 16)
    with kernforge.record(root):
        k(x, y, x.size)
    return load_recording(find_recordings(root)[0])


def test_space_has_the_recorded_configuration_as_baseline(rec) -> None:
    be = kernforge.get_backend("cpu")
    space = build_space(rec, be, preset="standard")
    assert space.baseline["opt.opt_level"] == "O2" and space.baseline["const.scalars"] is False
    assert "opt.fast_math" not in space.names  # needs a tolerance: not searched bitwise
    assert "opt.fast_math" in build_space(rec, be, preset="full", tolerant=True).names
    user = build_space(rec, be, preset="quick", user={"def.BLK": {"ordinal": [8, 64, 512]}})
    assert user.baseline["def.BLK"] == 8 and space.size() > 100


@pytest.mark.slow
def test_tune_writes_result_history_and_resumes(rec, tmp_path: Path) -> None:
    seen: list[int] = []
    o = tune_recording(rec, tmp_path, preset="quick", budget=Budget(trials=6), repeat=3,
                       user_space={"def.BLK": {"ordinal": [8, 64, 512]}},
                       on_trial=lambda t: seen.append(t.number))
    d = tmp_path / rec.name
    data = json.loads((d / "result.json").read_text())
    assert data["format"] == "kernforge-tune-result" and \
        data["status"] in ("OK", "REJECTED", "INCONCLUSIVE")
    assert data["recording"] == str(Path(rec.path).resolve())
    assert data["best"]["variant"]["launch"]["grid"] == [1, 1, 1]
    assert (d / "history.png").stat().st_size > 1000
    assert o.study.evaluations == 6 and all(t.ok for t in o.study.trials if t.evaluated)
    if o.validation is not None:  # the winner went through every integrity gate
        assert data["validation"]["verdict"] == o.validation.verdict
        assert data["provenance"]["kernforge_version"] and (d / "ledger.jsonl").exists()
        if o.validation.accepted:  # re-measured interleaved against the recording
            assert data["status"] == "OK" and len(o.ab.ratios) in looks(7, 21).at()
            assert data["speedup"] == pytest.approx(o.ab.speedup)
        elif o.validation.verdict == "inconclusive":  # a busy machine: neither way
            assert data["status"] == "INCONCLUSIVE" and data["speedup"] == 1.0
            assert data["validation"]["reason"] in ("idle:busy", "measure:inconclusive")
        else:  # a correct winner is refused only for being conclusively slower
            assert data["status"] == "REJECTED" and data["speedup"] == 1.0
            assert data["validation"]["reason"] == "regression:prior-best"
        # the stored times are the interleaved ones, the search's under their own names
        assert data["baseline_median_s"] == o.ab.median_a
        assert data["best_median_s"] == o.ab.median_b
        assert data["search_best_median_s"] == o.study.best_trial.median
    with pytest.raises(ConfigError, match="--resume"):
        tune_recording(rec, tmp_path, preset="quick", budget=Budget(trials=6))
    with pytest.raises(ConfigError, match="--remeasure"):  # finished: not measured again
        tune_recording(rec, tmp_path, preset="quick", budget=Budget(trials=9), resume=True)
    first = (d / "result.json").read_bytes()
    again = tune_recording(rec, tmp_path, preset="quick", budget=Budget(trials=9), repeat=3,
                           user_space={"def.BLK": {"ordinal": [8, 64, 512]}}, resume=True,
                           remeasure=True)
    assert again.study.evaluations == 9  # three more; the first six came from the study
    assert (d / "result.earlier-1.json").read_bytes() == first  # kept beside the new one


@pytest.mark.slow
def test_a_wrong_define_is_a_failed_trial_not_a_crash(rec, tmp_path: Path) -> None:
    o = tune_recording(rec, tmp_path, preset="quick", budget=Budget(trials=4), repeat=2,
                       user_space={"def.BLK": {"categorical": [8, "0 + garbage("]}},
                       sampler="exhaustive")
    statuses = {t.status.value for t in o.study.trials if t.evaluated}
    assert "COMPILE_FAILED" in statuses or "INVALID_CONFIG" in statuses


def test_result_times_are_the_interleaved_medians(rec, tmp_path: Path) -> None:
    """A search's best time (best of many, separate runs) is biased low: result.json stores the
    interleaved medians next to the interleaved speedup, the search's figures apart."""
    from types import SimpleNamespace

    from kernforge.core import Status
    from kernforge.harness import ABResult
    from kernforge.replay.tuning import TuningOutcome, write_result
    from kernforge.replay.validate import Validation

    ab = ABResult((2.0, 2.0, 2.0), ((4e-3,),) * 3, ((2e-3,),) * 3, ("a", "b", "a"), 1.9, 2.1)
    best = SimpleNamespace(config={"def.BLK": 64}, median=1e-3)
    study = SimpleNamespace(best_trial=best, evaluations=3, trials=(best,), stop_reason="trials")
    v = Validation(rec.name, "k", "accepted", Status.OK, "", speedup=2.0, ab=ab)
    (tmp_path / rec.name).mkdir()
    o = TuningOutcome(rec, tmp_path / rec.name, study, rec.variant, 3e-3, 1e-3, ab, v)
    data = json.loads(write_result(o, sampler="tpe", preset="quick").read_text())
    assert data["baseline_median_s"] == 4e-3 and data["best_median_s"] == 2e-3
    assert data["baseline_median_s"] / data["best_median_s"] == pytest.approx(data["speedup"])
    assert data["search_baseline_median_s"] == 3e-3 and data["search_best_median_s"] == 1e-3


def test_the_history_title_shows_the_measured_figure_with_its_verdict(rec, tmp_path: Path
                                                                      ) -> None:
    """The title showed ``o.speedup`` (1.0 for a winner not accepted) beside the interval:
    "1.000x [95% CI 0.990, 1.050]". It shows the interleaved figure and its verdict word."""
    ratios = (1.01, 1.02, 1.03, 1.02, 1.0, 1.05, 0.99)
    ab = ABResult(ratios, ((1.0,),) * 7, ((1.0,),) * 7, ("a", "b") * 3 + ("a",), 0.99, 1.05,
                  confidence=0.95)  # the title names the interval's own confidence
    speed = judge(ratios, confidence=0.95)
    assert speed.verdict is Verdict.INCONCLUSIVE
    unsure = Validation("c", "v", "inconclusive", Status.OK, speed.reason, speed=speed, ab=ab)
    o = TuningOutcome(rec, tmp_path, None, rec.variant, 2e-3, 1e-3, ab, unsure)  # type: ignore[arg-type]
    assert o.speedup == 1.0  # not accepted: what result.json counts
    title = history_title(o, sampler="tpe")
    assert "interleaved speedup 1.020x [95% CI 0.990, 1.050]" in title
    assert title.endswith("best vs recorded: inconclusive") and "1.000x" not in title
    rejected = replace(unsure, verdict="rejected", status=Status.WRONG_RESULT,
                       reason="wrong result")
    title = history_title(replace(o, validation=rejected), sampler="tpe")
    assert "REJECTED (wrong result)" in title and "speedup" not in title
    assert "stayed the best" in history_title(replace(o, ab=None, validation=None),
                                               sampler="tpe")
