"""What ``kernforge tune`` shows of each tuned unit, whatever it holds: one view
(:func:`summary_of`) of a recording's outcome (:class:`~kernforge.replay.tuning.TuningOutcome`)
and of a native unit's (:class:`~kernforge.replay.native_tune.NativeTuning`), read by the
per-unit progress line, the summary table and the headline (:func:`headline`) alike. Each
view says what ``kernforge export`` will make of the unit's result (:meth:`verdict`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..deploy.gate import NOISE_BAND, idle_of
from ..harness import by_precision, precision_of
from ..harness.verdict import Judgement, judge_evidence
from ..replay.native_tune import NativeTuning
from ..replay.tuning import TuningOutcome

STAYED = "the recorded configuration stayed best"
NO_DTYPES = "precision not recorded"  # a native unit's memory has no dtypes


def speed_verdict(o: TuningOutcome) -> Judgement | None:
    """The unit's speed verdict: the validation's own (an inconclusive validation's too:
    every gate passed, the speed was not decided), else from its figures (None: the
    recorded configuration stayed best, or a gate rejected the winner)."""
    v = o.validation
    if o.ab is None or (v is not None and not v.accepted and v.verdict != "inconclusive"):
        return None
    if v is not None and v.speed is not None:
        return v.speed
    idle, util = idle_of(v.to_json() if v is not None else None)
    conf, cov = o.ab.confidence, o.ab.coverage
    return judge_evidence(o.ab.speedup, (o.ab.ci_low, o.ab.ci_high), idle=idle,
                          utilisation=util, passes=o.ab.passes, confidence=conf,
                          coverage=cov if conf and cov is not None and cov < conf else None)


def export_verdict(o: Any) -> tuple[str, bool]:
    """What export will make of this unit's result (and whether its figures count)."""
    if isinstance(o, NativeTuning):
        return _NativeView(o).verdict()
    v = o.validation
    if v is not None and not v.accepted and v.verdict != "inconclusive":
        return f"REJECTED ({v.reason or v.status.value})", False
    if o.ab is None:
        return STAYED, True
    speed = speed_verdict(o)
    if speed is None:
        return "not exportable: never validated", False
    if v is None or not v.accepted:
        return f"not exportable: {speed.reason}", speed.conclusive
    return ("exportable" if speed.faster else f"not exportable: {speed.reason}"), \
        speed.conclusive


class _RecordingView:
    """A recording's outcome: its winner validated (:mod:`kernforge.replay.validate`)."""

    def __init__(self, o: Any) -> None:
        self.o = o

    @property
    def name(self) -> str:
        return str(self.o.recording.name)

    @property
    def precision(self) -> str:
        return precision_of([a.dtype for a in self.o.recording.args if a.written])

    def verdict(self) -> tuple[str, bool]:
        return export_verdict(self.o)

    def counted(self) -> float | None:
        """Its figure in the headline: a verified "faster" its speedup, a conclusive other
        verdict 1.0, an inconclusive one None (not counted)."""
        o = self.o
        words, counts = self.verdict()
        if words.startswith("REJECTED") or o.ab is None:
            return 1.0
        speed = speed_verdict(o)
        if speed is None or not counts:
            return None
        return float(o.ab.speedup) if speed.faster and words == "exportable" else 1.0

    @property
    def evaluations(self) -> int:
        return int(self.o.study.evaluations)

    @property
    def cache_hits(self) -> int:
        return sum(1 for t in self.o.study.trials if t.cached)

    @property
    def search_best_s(self) -> float | None:
        return self.o.best_s  # type: ignore[no-any-return]

    def times(self) -> tuple[float | None, float | None]:
        """Recorded and best seconds: the interleaved medians, else the search's."""
        o = self.o
        return (o.ab.median_a, o.ab.median_b) if o.ab else (o.baseline_s, o.best_s)

    def compared(self) -> tuple[float, tuple[float, float], float | None] | None:
        """The interleaved comparison of the winner: speedup, interval and its confidence
        (None: the recorded configuration stayed best)."""
        ab = self.o.ab
        return None if ab is None else (ab.speedup, (ab.ci_low, ab.ci_high), ab.confidence)

    def figure(self) -> float:
        """The speedup the table shows (a rejected winner's is 1.0)."""
        o, rejected = self.o, self.verdict()[0].startswith("REJECTED")
        return float(o.ab.speedup if o.ab and not rejected else o.speedup)

    def changed(self) -> str:
        """The winner's settings that differ from the recorded ones."""
        o = self.o
        best = o.study.best_trial
        changed = {k: v for k, v in (best.config.items() if best else ())
                   if o.study.baseline is None or o.study.baseline.config.get(k) != v}
        return ", ".join(f"{k}={v}" for k, v in changed.items()) or "(recorded)"


class _NativeView:
    """A native unit's outcome: its winner verified on the recorded outputs while it was
    evaluated, then compared interleaved and kept only when the gate accepts it."""

    def __init__(self, t: NativeTuning, band: float = NOISE_BAND) -> None:
        self.t, self.band = t, band

    @property
    def name(self) -> str:
        return self.t.unit.name

    precision = NO_DTYPES

    def _speed(self) -> Judgement | None:
        """The verdict tuning drew (the GPU's busy check and the runs' spread with it); the
        figures' alone for a result from before it kept one."""
        t = self.t
        if t.speedup is None or t.ci is None:
            return None
        return t.speed or judge_evidence(t.speedup, t.ci, band=self.band)

    def verdict(self) -> tuple[str, bool]:
        t = self.t
        if t.win:
            return "exportable", True
        speed = self._speed()
        if speed is None:
            return (STAYED, True) if t.best is None and t.results and t.results[0].ok \
                else (f"not exportable: {t.refused}", True)
        return f"not exportable: {t.refused or speed.reason}", speed.conclusive

    def counted(self) -> float | None:
        t, (_, counts) = self.t, self.verdict()
        if t.win and t.speedup is not None:
            return float(t.speedup)
        return 1.0 if counts else None

    @property
    def evaluations(self) -> int:
        t = self.t
        return t.study.evaluations if t.study is not None else len(t.results)

    @property
    def cache_hits(self) -> int:
        study = self.t.study
        return 0 if study is None else sum(1 for tr in study.trials if tr.cached)

    @property
    def search_best_s(self) -> float | None:
        ok = [m.median for m in self.t.results if m.ok and m.median is not None]
        return min(ok) if ok else None

    def times(self) -> tuple[float | None, float | None]:
        t = self.t
        if t.medians:
            return t.medians
        base = t.results[0].median if t.results and t.results[0].ok else None
        return base, self.search_best_s

    def compared(self) -> tuple[float, tuple[float, float], float | None] | None:
        t = self.t
        return None if t.speedup is None or t.ci is None else (t.speedup, t.ci, None)

    def figure(self) -> float:
        return float(self.t.speedup) if self.t.speedup is not None else 1.0

    def changed(self) -> str:
        t = self.t
        return "(recorded)" if t.best is None else t.variants[t.best].label()


UnitView = _RecordingView | _NativeView


def summary_of(outcome: Any) -> UnitView:
    """The one view of a unit's outcome, whatever the unit holds."""
    if isinstance(outcome, NativeTuning):
        return _NativeView(outcome)
    return _RecordingView(outcome)


def headline(outcomes: Sequence[Any]) -> list[str]:
    """Per precision, the geometric mean over the units whose verdict is conclusive: a
    verified "faster" counts its speedup, anything else the recorded kernel's 1.0; units
    whose verdict is inconclusive are left out and counted, never quoted: one line per
    precision (native units, whose memory has no dtypes, under :data:`NO_DTYPES`)."""
    lines: list[str] = []
    groups: dict[str, list[float | None]] = {}
    for o in outcomes:
        view = summary_of(o)
        groups.setdefault(view.precision, []).append(view.counted())
    for label in sorted(groups):
        known = [x for x in groups[label] if x is not None]
        unsure = len(groups[label]) - len(known)
        left = (f"; {unsure} unit(s) inconclusive (busy or noisy), not counted: tune them "
                f"again on an idle machine" if unsure else "")
        if not known:
            lines.append(f"{label}: inconclusive: no unit has a conclusive verdict{left}")
            continue
        s = by_precision([(label, x) for x in known])[label]
        lines.append(f"{label}: geometric mean speedup {s['geomean']:.3f}x over {s['n']} "
                     f"unit(s) with a conclusive verdict (verified faster units at their "
                     f"speedup, the others 1.0){left}")
    return lines
