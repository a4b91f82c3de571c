"""``kernforge tune``'s work on any units: each unit searched by a study (:func:`kernforge.tune.
tune`) over the space its backend gives it, under one budget and sampler choice (by default
TPE for a unit that holds source, exhaustive for one that holds a module image: its space is
small), one unit after another in the order found, each unit's signed result in
OUT/<unit>/result.json. What is shown while it runs is the caller's (:class:`TuneDisplay`);
what it found is returned (:class:`TuneRun`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ..backends.image_build import bind_source
from ..core import ConfigError, Recording, RecordingError, Unit
from ..core.errors import SpaceChangedError
from ..core.lock import directory_lock
from ..core.native import NativeRecording, NativeSource
from ..harness.cache import CacheChoice
from ..replay.cache_protocol import apply_mode, protocol_for
from ..replay.native_tune import RESULT as NATIVE_RESULT
from ..replay.native_tune import NativeTuning
from ..replay.tuning import finished_result, tune_recording
from ..replay.unit_replay import DRIVER
from ..tune import Budget
from .native_units import bind_units, share_native_winners, tune_native_unit
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


class TuneSteps(Protocol):
    """The display of the units' studies, one unit after another, whatever each holds."""

    def finished(self, i: int, n: int, result: Path) -> None:
        """Unit ``i`` of ``n`` finished in an earlier run: ``result`` stands."""

    def started(self, i: int, n: int, name: str, cache: CacheChoice,
                trials: int | None) -> Callable[[Any], None]:
        """Unit ``i`` of ``n`` (named ``name``) starts (``trials``: its budget's evaluations,
        None: every point of its space); returns what is called with each trial."""

    def done(self, i: int, n: int, name: str, outcome: Any) -> None:
        """Unit ``i`` of ``n`` is tuned (``outcome``: read through
        :func:`.tune_summary.summary_of`)."""


class TuneDisplay(Protocol):
    def units(self) -> AbstractContextManager[TuneSteps]:
        """The display around the units' studies."""


@dataclass
class TuneRun:
    """``outcomes``: the units tuned now, in the order found (a recording's
    :class:`TuningOutcome`, a native unit's :class:`NativeTuning`: read both through
    :func:`.tune_summary.summary_of`); ``finished``: the names of units ``--resume`` found
    finished earlier."""

    outcomes: list[Any] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)


Isolating = Callable[[Iterable[str]], AbstractContextManager[Any]]
SAMPLED_TRIALS = 30  # a unit's evaluations when the sampler has no end of its own
PASSES = 7  # interleaved passes of a winner's comparison with the recorded configuration


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


def _check(units: Sequence[Unit], s: TuneSettings) -> None:
    """The settings that apply to some units only, checked against the units there are."""
    native = [u for u in units if isinstance(u, NativeRecording)]
    if s.source is not None and not native:
        raise ConfigError("--source binds native units; none under this path",
                          hint="record the program with kernforge record -- COMMAND")
    if native and isinstance(s.tolerance, dict):
        raise ConfigError("a native unit's memory has no buffer names: --tolerance "
                          "BUF=SPEC does not apply to it",
                          hint="give one --tolerance SPEC for native units; select the "
                               "others with --kernels")


def tune_all(units: Sequence[Unit], out: Path, s: TuneSettings, *, display: TuneDisplay,
             isolation: Isolating, notes: Notes = QUIET) -> TuneRun:
    """Every unit tuned in the order found, each by the backend it needs, with the same
    progress and result (``isolation(backends)``: the worker pool the candidates of units
    that hold source run in). A unit's cache mode (``s.cache``) is kept with it first: the
    gates and export use it too. A unit whose data turns out damaged is skipped
    (``notes.damaged``) while others are tuned; with none tuned or finished, its
    RecordingError is raised. Then the winners of a kernel's native launches that differ
    only in scalars get the chance to agree (:func:`.native_units.share_native_winners`)."""
    for u in units:
        if s.cache is not None:  # not given: kept as is
            apply_mode(u.path, s.cache)
    _check(units, s)
    native = [u for u in units if isinstance(u, NativeRecording)]
    bound = bind_units(native, bind_source(s.source, includes=s.includes, defines=s.defines),
                       notes) if s.source is not None else {}
    recs = [u for u in units if isinstance(u, Recording)]
    run = TuneRun()
    damaged: list[RecordingError] = []
    with directory_lock(out, "tuning run directory"), \
            (isolation(sorted({r.backend for r in recs})) if recs else nullcontext()) as iso, \
            display.units() as steps:
        for i, u in enumerate(units, 1):
            done = finished_unit(out, u) if s.resume else None
            if done is not None and not s.remeasure:  # reported, not measured again
                steps.finished(i, len(units), done)
                run.finished.append(u.unit)
                continue
            sampler, budget = sampler_for(u, s)
            on_trial = steps.started(i, len(units), u.unit, protocol_for(u), budget.trials)
            try:
                outcome = _tune(u, out, s, sampler, budget, bound, iso, on_trial)
            except RecordingError as exc:  # damaged since it was loaded: the others go on
                damaged.append(exc)
                continue
            except SpaceChangedError as exc:
                raise ConfigError(
                    f"{out / u.unit}: {exc.message}",
                    hint="resume with the options the run was started with (--preset, "
                         "--space, --source, -D, --try-define, --tolerance), or tune into "
                         "another --out") from None
            run.outcomes.append(outcome)
            steps.done(i, len(units), u.unit, outcome)
        tuned = [o for o in run.outcomes if isinstance(o, NativeTuning)]
        share_native_winners(tuned, out, repeat=s.repeat, passes=PASSES,
                             tolerance=s.tolerance, notes=notes)
    if damaged and not run.outcomes and not run.finished:
        raise damaged[0]
    for bad in damaged:
        notes.damaged(bad)
    return run


def finished_unit(out: Path, u: Unit) -> Path | None:
    """The result of ``u``'s finished tuning in ``out``: its result.json, or for a native
    unit the run's ``native.json`` that lists it (written before every unit had its own)."""
    done = finished_result(out / u.unit)
    legacy = out / NATIVE_RESULT
    if done is not None or not isinstance(u, NativeRecording) or not legacy.is_file():
        return done
    try:
        doc = json.loads(legacy.read_text("utf-8"))
        listed = {Path(str(e["unit"])).name for e in doc["units"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"cannot read {legacy}: {exc}",
                          hint="move it away to tune the native units again") from None
    return legacy if u.path.name in listed else None


def _tune(u: Unit, out: Path, s: TuneSettings, sampler: str, budget: Budget,
          bound: Mapping[Path, NativeSource], iso: Any,
          on_trial: Callable[[Any], None]) -> Any:
    """One unit's study, by the backend it needs: a module image's in its session child
    (geometry, carveout, JIT options, source builds), source's in the worker pool."""
    if isinstance(u, NativeRecording):
        return tune_native_unit(u, out, repeat=s.repeat, passes=PASSES, sampler=sampler,
                                budget=budget, seed=s.seed, resume=s.resume,
                                remeasure=s.remeasure, tolerance=s.tolerance,
                                source=bound.get(u.path), defines=s.try_defines,
                                on_trial=on_trial)
    assert isinstance(u, Recording)
    return tune_recording(u, out, preset=s.preset, sampler=sampler, budget=budget,
                          seed=s.seed, user_space=s.user_space, tolerance=s.tolerance,
                          repeat=s.repeat, resume=s.resume, remeasure=s.remeasure,
                          on_trial=on_trial, isolate=iso)
