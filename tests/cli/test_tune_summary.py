"""The tune summary's verdict column: what export will make of each unit's result, so that a
rejected winner or one measured on a busy device does not read as a win."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kernforge.cli.tune_cmd import _headline
from kernforge.core import Status
from kernforge.harness.compare import ABResult
from kernforge.harness.provenance import IdleCheck
from kernforge.pipeline.units import export_verdict as _verdict
from kernforge.replay.validate import Validation


def _ab(speedup: float, lo: float, hi: float) -> ABResult:
    return ABResult((speedup,) * 10, ((1.0,),) * 10, ((1.0,),) * 10, ("a",) * 10, lo, hi,
                    confidence=1 - 0.01 / 3)


def _outcome(ab: ABResult | None, validation: Validation | None) -> Any:
    rec = SimpleNamespace(args=(SimpleNamespace(dtype="float64", written=True),))
    return SimpleNamespace(ab=ab, validation=validation, directory=Path("."), recording=rec)


def _validation(verdict: str, *, idle: bool | None = True, reason: str = "") -> Validation:
    return Validation("c", "v", verdict, Status.OK if verdict != "rejected"
                      else Status.WRONG_RESULT, reason,
                      idle=IdleCheck(idle, 0.9 if idle is False else 0.0, "nvml"))


def test_each_verdict() -> None:
    ok = _validation("accepted")
    assert _verdict(_outcome(_ab(1.3, 1.2, 1.4), ok)) == ("exportable", True)
    words, counts = _verdict(_outcome(_ab(1.01, 1.0, 1.02), ok))
    assert words.startswith("not exportable: inconclusive") and not counts
    words, counts = _verdict(_outcome(_ab(5.0, 4.0, 6.0), _validation("accepted", idle=False)))
    assert "busy" in words and not counts
    words, counts = _verdict(_outcome(_ab(1.3, 0.7, 1.06),
                                      _validation("rejected", reason="verify:fresh")))
    assert words == "REJECTED (verify:fresh)" and not counts
    assert _verdict(_outcome(None, None)) == ("the recorded configuration stayed best", True)


def test_the_headline_quotes_only_conclusive_verified_results(capsys) -> None:
    """Issue 43: a 3-second tune under load printed "fp64: geometric mean speedup 6.771x"."""
    busy = _outcome(_ab(6.999, 5.443, 8.627), _validation("accepted", idle=False))
    _headline([busy])
    out = capsys.readouterr().out
    assert "6.9" not in out and "6.7" not in out and "fp64: inconclusive" in out
    fast = _outcome(_ab(1.3, 1.2, 1.4), _validation("accepted"))
    noise = _outcome(_ab(1.01, 1.0, 1.02), _validation("accepted"))
    _headline([busy, fast, noise])
    out = capsys.readouterr().out
    assert "geometric mean speedup 1.300x over 1 unit(s)" in out
    assert "2 unit(s) inconclusive" in out


def _busy_validation(ab: ABResult) -> Validation:
    """What validate returns for a winner measured on a busy machine: every correctness gate
    passed, the speed undecided (verdict "inconclusive", not "accepted")."""
    from kernforge.core.verdict import judge_evidence
    speed = judge_evidence(ab.speedup, (ab.ci_low, ab.ci_high), idle=False, utilisation=0.59)
    return Validation("c", "v", "inconclusive", Status.OK, "idle:busy", message=speed.reason,
                      speedup=ab.speedup, ab=ab, idle=IdleCheck(False, 0.59, "/proc/stat"),
                      speed=speed)


def test_an_inconclusive_validation_is_reported_as_such() -> None:
    """A winner validated on a busy machine read "not exportable: never validated" and was
    left out of the count of inconclusive units."""
    ab = _ab(1.18, 1.148, 1.264)
    words, counts = _verdict(_outcome(ab, _busy_validation(ab)))
    assert words.startswith("not exportable: inconclusive: the device was busy"), words
    assert not counts


def test_the_summary_shows_the_figure_of_its_interval(capsys, tmp_path) -> None:
    """The table printed "1.000x [1.148, 1.264]" (a median outside its own interval) for a
    winner whose validation was inconclusive; and did not count it as inconclusive."""
    from kernforge.cli.tune_cmd import _summary
    from kernforge.tune.loop import TuneResult

    ab = _ab(1.18, 1.148, 1.264)
    o = _outcome(ab, _busy_validation(ab))
    o.recording.name = "heat_step-1"
    o.study = TuneResult(trials=(), best_trial=None, baseline=None, stop_reason="trials",
                         evaluations=0, study_name="s", storage=None)
    o.speedup = 1.0  # what TuningOutcome.speedup gives a winner that was not accepted
    _summary(tmp_path, [o])
    out = capsys.readouterr().out
    assert "1.180x [1.148, 1.264]" in out and "1.000x" not in out
    assert "speedup [99.67% CI]" in out
    assert "1 of 1 unit(s) have an inconclusive verdict" in out


def test_a_units_done_line_says_its_intervals_confidence() -> None:
    from kernforge.cli.tune_cmd import _done, _Seen
    from kernforge.tune.loop import TuneResult

    o = _outcome(_ab(1.18, 1.148, 1.264), None)
    o.study = TuneResult(trials=(), best_trial=None, baseline=None, stop_reason="trials",
                         evaluations=0, study_name="s", storage=None)
    o.best_s = 1e-3
    line = _done(_Seen(), o)
    assert line.endswith("measured again interleaved: 1.180x [99.67% CI 1.148, 1.264]"), line


def test_a_refused_native_unit_does_not_read_as_the_recorded_one_staying_best() -> None:
    from kernforge.cli.tune_cmd import _done, _Seen
    from kernforge.core import Measurement
    from kernforge.replay.native import NativeVariant
    from kernforge.replay.native_tune import NativeTuning

    t = NativeTuning(Path("heat-0"), SimpleNamespace(), [NativeVariant()],  # type: ignore[arg-type]
                     [Measurement(Status.RUNTIME_FAILED, "the replay process died")],
                     refused="the recorded configuration does not replay: RUNTIME_FAILED")
    line = _done(_Seen(), t)
    assert "stayed best" not in line and "does not replay" in line
    stayed = NativeTuning(Path("heat-0"), SimpleNamespace(), [NativeVariant()],  # type: ignore[arg-type]
                          [Measurement(Status.OK, samples=(1e-6,))])
    assert _done(_Seen(), stayed).endswith("; the recorded configuration stayed best")


def test_a_native_winner_measured_on_a_busy_gpu_is_inconclusive_not_not_faster() -> None:
    """The figures alone (5.5x [4.9, 6.6]) read faster; the verdict tuning drew says the GPU
    was busy: the summary reports it inconclusive, not counted, with that reason."""
    from kernforge.core import Measurement
    from kernforge.harness.verdict import judge_evidence
    from kernforge.pipeline.tune_summary import _NativeView
    from kernforge.replay.native import NativeVariant
    from kernforge.replay.native_tune import NativeTuning

    busy = judge_evidence(5.455, (4.878, 6.627), idle=False, utilisation=0.9, device="the GPU")
    t = NativeTuning(Path("heat-0"), SimpleNamespace(),  # type: ignore[arg-type]
                     [NativeVariant(), NativeVariant(carveout=0)],
                     [Measurement(Status.OK, samples=(2e-6,)),
                      Measurement(Status.OK, samples=(1e-6,))],
                     best=1, speedup=5.455, ci=(4.878, 6.627), refused=busy.reason, speed=busy)
    text, conclusive = _NativeView(t).verdict()
    assert not conclusive and "the GPU was busy (90% busy)" in text
    assert _NativeView(t).counted() is None
