"""``kernforge tune``'s work on any units: each unit searched by a study (:func:`kernforge.tune.
tune`) over the space its backend gives it, under one budget and sampler choice (by default
TPE for a unit that holds source, exhaustive for one that holds a module image: its space is
small); native units first, then the recordings, each unit's signed result in
OUT/<unit>/result.json. What is shown while it runs is the caller's (:class:`TuneDisplay`);
what it found is returned (:class:`TuneRun`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ..backends.image_build import bind_source
from ..core import ConfigError, Recording, RecordingError, Unit
from ..core.lock import directory_lock
from ..deploy.gate import idle_of
from ..harness import by_precision, precision_of
from ..harness.cache import CacheChoice
from ..harness.verdict import Judgement, judge_evidence
from ..replay.cache_protocol import apply_mode, protocol_for
from ..replay.native_tune import NativeTuning
from ..replay.tuning import TuningOutcome, finished_result, tune_recording
from ..replay.unit_replay import DRIVER
from ..tune import Budget
from .native_units import tune_native_units
from .notes import QUIET, Notes


@dataclass(frozen=True)
class TuneSettings:
    """How every unit is tuned (``kernforge tune``'s options). ``budget``: each unit's
    (``trials`` None: the sampler's own end, :data:`SAMPLED_TRIALS` for a sampled search);
    ``sampler`` None: the unit's backend's choice (:func:`sampler_for`); ``tolerance``: one
    policy, or one per buffer name (a native unit takes one);
    ``source``/``includes``/``defines``: a ``--source`` file bound to native units;
    ``try_defines``: its candidate define sets."""

    budget: Budget
    preset: str = "standard"
    sampler: str | None = None
    seed: int = 0
    user_space: Any = None
    tolerance: Any = None
    repeat: int = 7
    resume: bool = False
    remeasure: bool = False
    cache: str | None = None
    source: Path | None = None
    includes: Sequence[str] = ()
    defines: Sequence[str] = ()
    try_defines: Sequence[Sequence[tuple[str, str]]] = ()


class RecordingSteps(Protocol):
    """The display of the recordings' studies, one unit after another."""

    def finished(self, i: int, n: int, result: Path) -> None:
        """Unit ``i`` of ``n`` finished in an earlier run: ``result`` stands."""

    def started(self, i: int, n: int, rec: Recording, cache: CacheChoice,
                trials: int | None) -> Callable[[Any], None]:
        """Unit ``i`` of ``n`` starts (``trials``: its budget's evaluations, None: every
        point of its space); returns what is called with each trial."""

    def done(self, i: int, n: int, rec: Recording, outcome: TuningOutcome) -> None:
        """Unit ``i`` of ``n`` is tuned."""


class TuneDisplay(Protocol):
    def finished(self, result: Path) -> None:
        """A native unit finished in an earlier run: ``result`` stands."""

    def native_tuned(self, done: Sequence[NativeTuning], out: Path) -> None:
        """The native units are tuned (their results under the run directory ``out``)."""

    def recordings(self) -> AbstractContextManager[RecordingSteps]:
        """The display around the recordings' studies."""


@dataclass
class TuneRun:
    """``native``: the native units tuned now; ``outcomes``: the recordings tuned now;
    ``finished``: the names of units ``--resume`` found finished earlier."""

    native: list[NativeTuning] = field(default_factory=list)
    outcomes: list[TuningOutcome] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)


Isolating = Callable[[Iterable[str]], AbstractContextManager[Any]]
SAMPLED_TRIALS = 30  # a unit's evaluations when the sampler has no end of its own


def sampler_for(unit: Unit, s: TuneSettings) -> tuple[str, Budget]:
    """The sampler and budget of ``unit``'s study: the given ones, else the backend's choice:
    exhaustive for a unit that holds a module image (replayed by the driver backend: its
    space, one change at a time from the recorded configuration, is small), TPE otherwise;
    a sampled search without ``--trials`` stops after :data:`SAMPLED_TRIALS` evaluations."""
    sampler = s.sampler or ("exhaustive" if unit.backend == DRIVER else "tpe")
    budget = s.budget
    if budget.trials is None and sampler != "exhaustive":
        budget = replace(budget, trials=SAMPLED_TRIALS)
    return sampler, budget


def tune_all(recs: Sequence[Recording], native: Sequence[Any], out: Path, s: TuneSettings, *,
             display: TuneDisplay, isolation: Isolating, notes: Notes = QUIET) -> TuneRun:
    """Every unit tuned: native units, then recordings (``isolation(backends)``: the worker
    pool the recordings' candidates run in). A unit's cache mode (``s.cache``) is kept with
    it first: the gates and export use it too."""
    for path in [r.path for r in recs] + [r.path for r in native]:
        if s.cache is not None:  # not given: kept as is
            apply_mode(path, s.cache)
    if s.source is not None and not native:
        raise ConfigError("--source binds native units; none under this path",
                          hint="record the program with kernforge record -- COMMAND")
    run = TuneRun()
    if native and s.resume and not s.remeasure:  # finished units reported, not measured
        left = []
        for r in native:
            done = finished_result(out / r.path.name)
            if done is None:
                left.append(r)
                continue
            display.finished(done)
            run.finished.append(r.path.name)
        native = left
    if native:  # geometry, carveout, JIT options, source builds
        if isinstance(s.tolerance, dict):
            raise ConfigError("a native unit's memory has no buffer names: --tolerance "
                              "BUF=SPEC does not apply to it",
                              hint="give one --tolerance SPEC for native units; select the "
                                   "others with --kernels")
        source = bind_source(s.source, includes=s.includes, defines=s.defines) \
            if s.source is not None else None
        sampler, budget = sampler_for(native[0], s)
        with directory_lock(out, "tuning run directory"):
            run.native = tune_native_units(native, out, repeat=s.repeat, passes=7,
                                           sampler=sampler, budget=budget, seed=s.seed,
                                           resume=s.resume, tolerance=s.tolerance,
                                           source=source, defines=s.try_defines,
                                           others=bool(recs), notes=notes)
        display.native_tuned(run.native, out)
    if not recs:
        return run
    with directory_lock(out, "tuning run directory"), \
            isolation(sorted({r.backend for r in recs})) as iso:
        _recordings(recs, out, s, iso, display, run, notes)
    return run


def _recordings(recs: Sequence[Recording], out: Path, s: TuneSettings, iso: Any,
                display: TuneDisplay, run: TuneRun, notes: Notes) -> None:
    """Every recording tuned in turn; those ``--resume`` found finished are reported."""
    with display.recordings() as steps:
        for i, rec in enumerate(recs, 1):
            done = finished_result(out / rec.name) if s.resume else None
            if done is not None and not s.remeasure:
                steps.finished(i, len(recs), done)
                run.finished.append(rec.name)
                continue
            sampler, budget = sampler_for(rec, s)
            on_trial = steps.started(i, len(recs), rec, protocol_for(rec), budget.trials)
            try:
                run.outcomes.append(tune_recording(
                    rec, out, preset=s.preset, sampler=sampler, budget=budget,
                    seed=s.seed, user_space=s.user_space, tolerance=s.tolerance,
                    repeat=s.repeat, resume=s.resume, remeasure=s.remeasure,
                    on_trial=on_trial, isolate=iso))
            except RecordingError as exc:  # damaged since it was loaded: the others go on
                notes.damaged(exc)
                continue
            steps.done(i, len(recs), rec, run.outcomes[-1])


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


def export_verdict(o: TuningOutcome) -> tuple[str, bool]:
    """What export will make of this unit's result (and whether its figures count)."""
    v = o.validation
    if v is not None and not v.accepted and v.verdict != "inconclusive":
        return f"REJECTED ({v.reason or v.status.value})", False
    if o.ab is None:
        return "the recorded configuration stayed best", True
    speed = speed_verdict(o)
    if speed is None:
        return "not exportable: never validated", False
    if v is None or not v.accepted:
        return f"not exportable: {speed.reason}", speed.conclusive
    return ("exportable" if speed.faster else f"not exportable: {speed.reason}"), \
        speed.conclusive


def headline(outcomes: Sequence[TuningOutcome]) -> list[str]:
    """Per precision, the geometric mean over the units whose verdict is conclusive: a
    verified "faster" counts its speedup, anything else the recorded kernel's 1.0; units
    whose verdict is inconclusive are left out and counted, never quoted: one line per
    precision."""
    lines: list[str] = []
    groups: dict[str, list[tuple[float | None, str]]] = {}
    for o in outcomes:
        label = precision_of([a.dtype for a in o.recording.args if a.written])
        speed, (words, counts) = speed_verdict(o), export_verdict(o)
        if words.startswith("REJECTED") or o.ab is None:
            groups.setdefault(label, []).append((1.0, words))
        elif speed is None or not counts:
            groups.setdefault(label, []).append((None, words))
        else:
            groups.setdefault(label, []).append(
                (o.ab.speedup if speed.faster and words == "exportable" else 1.0, words))
    for label in sorted(groups):
        known = [x for x, _ in groups[label] if x is not None]
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
