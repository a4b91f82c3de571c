"""The one path every command takes through recorded units, whatever recorded them: a
recording (format v1: source, arguments, the capture inside Python) or a native unit (format
v2: a launch the driver interposer recorded from an unchanged program). One entry point per
command (:func:`load_units`, :func:`replay_units`, :func:`describe_units`,
:func:`tune_units`, :func:`export_units`, :func:`evolve_units`, :func:`validate_unit`)
takes the units of both kinds
and dispatches here; the CLI parses arguments and prints what comes back.

What a pipeline says while it works goes to the caller's :class:`~.notes.Notes`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core import ConfigError, RecordingError, Tolerance
from ..replay.cache_protocol import protocol_for
from ..replay.unit_replay import ReplayRequest, UnitReplay, replay_unit
from .evolve import EvolveOutcome
from .evolve_run import EvolveDisplay, EvolveRun, evolve_all
from .export import ExportOutcome, export_run
from .loading import Units, load_units
from .native_evolve import NativeEvolveOutcome
from .notes import QUIET, Notes
from .tune_run import Isolating, TuneDisplay, TuneRun, TuneSettings, tune_all
from .tune_summary import UnitView, export_verdict, headline, summary_of
from .validation import ValidateRequest, Validation, validate_unit

__all__ = ["EvolveDisplay", "EvolveOutcome", "EvolveRun", "ExportOutcome",
           "NativeEvolveOutcome", "Notes", "TuneDisplay", "TuneRun",
           "TuneSettings", "UnitReplay", "UnitView", "Units", "ValidateRequest", "Validation",
           "describe_units", "evolve_units", "export_units", "export_verdict", "headline",
           "load_units", "replay_units", "summary_of", "tune_units", "validate_unit"]


def describe_units(units: Units) -> list[dict[str, Any]]:
    """What each unit holds (``kernforge inspect --json``), with the cache state it replays
    in: the units that hold a module image first (stable: otherwise in the order found)."""
    return [u.describe(protocol_for(u).to_json())
            for u in sorted(units.every, key=lambda u: "image" not in u.holds)]


def replay_units(units: Units, *, options: Mapping[str, Any] | None = None,
                 defines: Mapping[str, Any] | None = None, threads: int | None = None,
                 tolerance: Tolerance | dict[str, Tolerance] | None = None,
                 dtype: str | None = None, warmup: int = 3, repeat: int = 10,
                 cache: str | None = None, isolation: Isolating,
                 notes: Notes = QUIET,
                 progress: Callable[[str], None] = lambda line: None) -> list[UnitReplay]:
    """Every unit replayed, verified and timed, in the order found, each by the backend it
    needs (:func:`kernforge.replay.unit_replay.replay_unit`; the units that hold source only
    in the worker pool ``isolation(backends)``). ``cache`` None keeps each unit's kept
    choice. A unit whose data turns out damaged is skipped (``notes.damaged``) while others
    replay; with none replayed, its RecordingError is raised. ``progress`` hears of each
    unit as its replay starts."""
    req = ReplayRequest(options=options, defines=defines, threads=threads,
                        tolerance=tolerance, dtype=dtype, warmup=warmup, repeat=repeat)
    req.check(units.every)
    rows: list[UnitReplay] = []
    damaged: list[RecordingError] = []
    with isolation(units.backends) as iso:
        for i, u in enumerate(units.every, 1):
            progress(f"{i}/{len(units.every)} replaying {u.unit}")
            try:
                rows.append(replay_unit(u, req, cache=cache, isolate=iso))
            except RecordingError as exc:  # damaged since it was loaded: the others go on
                damaged.append(exc)
    if damaged and not rows:
        raise damaged[0]
    for bad in damaged:
        notes.damaged(bad)
    return rows


def tune_units(units: Units, out: Path, settings: TuneSettings, *, display: TuneDisplay,
               isolation: Isolating, notes: Notes = QUIET) -> TuneRun:
    """Every unit tuned into the run directory ``out``, in the order found
    (:func:`.tune_run.tune_all`)."""
    if not units.every:
        raise ConfigError(f"no recorded units to tune under {units.where}",
                          hint="check the path and --kernels")
    return tune_all(units.every, out, settings, display=display, isolation=isolation,
                    notes=notes)


def export_units(run_dir: Path, spec: Path | None, *, min_speedup: float, band: float,
                 notes: Notes = QUIET) -> ExportOutcome:
    """The deployment spec of a tuning run of either kind (:func:`.export.export_run`)."""
    return export_run(run_dir, spec, min_speedup=min_speedup, band=band, notes=notes)


def evolve_units(path: str | Path, cfg: Any, out: Path, *, kernels: str | None,
                 display: EvolveDisplay, isolation: Callable[[int], Any],
                 resume: bool = False, remeasure: bool = False, tolerance: str | None = None,
                 source: Path | None = None, includes: Sequence[str] = (),
                 defines: Sequence[str] = (), notes: Notes = QUIET) -> EvolveRun:
    """The source of the kernels under ``path`` evolved, whatever recorded them
    (:func:`.evolve_run.evolve_all`)."""
    return evolve_all(path, cfg, out, kernels=kernels, display=display, isolation=isolation,
                      resume=resume, remeasure=remeasure, tolerance=tolerance, source=source,
                      includes=includes, defines=defines, notes=notes)
