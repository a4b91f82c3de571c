"""The one path every command takes through recorded units, whatever recorded them: a
recording (format v1: source, arguments, the capture inside Python) or a native unit (format
v2: a launch the driver interposer recorded from an unchanged program). One entry point per
command (:func:`load_units`, :func:`replay_units`, :func:`describe_units`,
:func:`tune_units`, :func:`export_units`, :func:`evolve_units`, :func:`validate_native_unit`)
takes the units of both kinds
and dispatches here; the CLI parses arguments and prints what comes back.

What a pipeline says while it works goes to the caller's :class:`~.notes.Notes`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import ConfigError, LaunchConfig, Measurement, Recording, RecordingError, Tolerance
from ..harness.cache import CacheChoice
from ..record.native_format import is_native_unit
from ..replay import replay
from ..replay.cache_protocol import choose, protocol_for
from ..replay.native_validate import NativeValidation, validate_native
from .evolve_run import EvolveDisplay, EvolveRun, evolve_all
from .export import ExportOutcome, export_run
from .loading import Units, load_units
from .native_units import NativeRow, replay_native
from .notes import QUIET, Notes
from .tune_run import (
    Isolating,
    TuneDisplay,
    TuneRun,
    TuneSettings,
    export_verdict,
    headline,
    tune_all,
)

__all__ = ["EvolveDisplay", "EvolveRun", "ExportOutcome", "NativeValidation", "Notes",
           "Replayed", "TuneDisplay", "TuneRun", "TuneSettings", "Units", "describe_units",
           "evolve_units", "export_units", "export_verdict", "headline", "load_units",
           "replay_units", "tune_units", "validate_native_unit"]


def describe_units(units: Units) -> list[dict[str, Any]]:
    """What each unit holds (``kernforge inspect --json``), with the cache state it replays
    in: the units that hold a module image first (stable: otherwise in the order found)."""
    return [u.describe(protocol_for(u).to_json())
            for u in sorted(units.every, key=lambda u: "image" not in u.holds)]


@dataclass
class Replayed:
    """``recorded``: (unit, kernel, measurement) of the recordings replayed, ``caches`` the
    cache state each ran in; ``native``: the native units' rows (unit, kernel, measurement,
    info: placement, the program's time, the cache state)."""

    recorded: list[tuple[str, str, Measurement]] = field(default_factory=list)
    caches: list[CacheChoice] = field(default_factory=list)
    native: list[NativeRow] = field(default_factory=list)

    def rows(self) -> list[tuple[str, str, Measurement]]:
        return self.recorded + [(u, k, m) for u, k, m, _ in self.native]

    def info(self) -> dict[str, dict[str, Any]]:
        """Per unit, what ``--json`` writes beside its measurement."""
        out: dict[str, dict[str, Any]] = {u: {"cache": c.to_json()}
                                          for (u, _, _), c in zip(self.recorded, self.caches)}
        out.update({u: i for u, _, _, i in self.native})
        return out


def replay_units(units: Units, *, options: Mapping[str, Any] | None = None,
                 defines: Mapping[str, Any] | None = None, threads: int | None = None,
                 tolerance: Tolerance | dict[str, Tolerance] | None = None,
                 native_tolerance: str | None = None, dtype: str | None = None,
                 warmup: int = 3, repeat: int = 10, cache: str | None = None,
                 isolation: Isolating, notes: Notes = QUIET) -> Replayed:
    """Every unit replayed, verified and timed: the recordings with the overrides (in the
    worker pool ``isolation(backends)``), then the native units at their recorded addresses
    (``native_tolerance``, ``dtype``: how their written memory is compared). ``cache`` None
    keeps each unit's kept choice. A unit found damaged is skipped (``notes.damaged``)."""
    if units.native and isinstance(tolerance, dict):
        raise ConfigError("a native unit's memory has no buffer names: --tolerance BUF=SPEC "
                          "does not apply to it",
                          hint="give one --tolerance SPEC (with --dtype) for native units; "
                               "select the others with --kernels")
    out = Replayed()
    with isolation(units.backends) as iso:
        for rec in units.recordings:
            launch = (LaunchConfig(rec.launch.grid, rec.launch.block, rec.launch.shared_mem,
                                   threads) if threads is not None else None)

            done: dict[bool, Measurement] = {}

            def once(flush: bool, rec: Recording = rec, launch: LaunchConfig | None = launch,
                     done: dict[bool, Measurement] = done) -> float | None:
                done[flush] = m = replay(rec, options=options, defines=defines, launch=launch,
                                         tolerance=tolerance, warmup=warmup, repeat=repeat,
                                         flush=flush, isolate=iso)
                return m.median if m.ok else None

            try:  # each unit's cache state chosen as every unit's is (cache_protocol.choose)
                choice = choose(rec, cache, once)
                if choice.flush not in done:
                    once(choice.flush)
            except RecordingError as exc:  # damaged since it was loaded: the others go on
                notes.damaged(exc)
                continue
            m = done[choice.flush]
            out.caches.append(choice)
            out.recorded.append((rec.name, rec.source.entry, m))
    if units.native:
        out.native = replay_native(units.native, warmup=warmup, repeat=repeat,
                                   tolerance=native_tolerance, dtype=dtype, cache=cache,
                                   others=bool(out.recorded), notes=notes)
    return out


def tune_units(units: Units, out: Path, settings: TuneSettings, *, display: TuneDisplay,
               isolation: Isolating, notes: Notes = QUIET) -> TuneRun:
    """Every unit tuned into the run directory ``out`` (:func:`.tune_run.tune_all`)."""
    if not units.every:
        raise ConfigError(f"no recorded units to tune under {units.where}",
                          hint="check the path and --kernels")
    return tune_all(units.recordings, units.native, out, settings, display=display,
                    isolation=isolation, notes=notes)


def export_units(run_dir: Path, spec: Path | None, *, min_speedup: float, band: float,
                 notes: Notes = QUIET) -> ExportOutcome:
    """The deployment spec of a tuning run of either kind (:func:`.export.export_run`)."""
    return export_run(run_dir, spec, min_speedup=min_speedup, band=band, notes=notes)


def evolve_units(path: str | Path, cfg: Any, out: Path, *, kernels: str | None,
                 display: EvolveDisplay, isolation: Callable[[int], Any],
                 resume: bool = False, remeasure: bool = False, tolerance: str | None = None,
                 source: Path | None = None, includes: Sequence[str] = (),
                 defines: Sequence[str] = (), notes: Notes = QUIET) -> EvolveRun:
    """The source of the kernels under ``path`` evolved (:func:`.evolve_run.evolve_all`):
    native units' when there are any, else the recordings'."""
    return evolve_all(path, cfg, out, kernels=kernels, display=display, isolation=isolation,
                      resume=resume, remeasure=remeasure, tolerance=tolerance, source=source,
                      includes=includes, defines=defines, notes=notes)


def validate_native_unit(path: str | Path, *, source: str | None, tolerance: list[str] | None,
                         passes: int, band: float, refused: Sequence[str] = ()
                         ) -> NativeValidation | None:
    """``kernforge integrity validate`` of a native unit (one launch or a sequence:
    :mod:`kernforge.replay.native_validate`); None when ``path`` is not a native unit.
    ``refused``: options the caller was given that apply to source units only."""
    if not is_native_unit(path):
        return None
    if refused:
        raise ConfigError(f"{refused[0]} does not apply to a native unit",
                          hint="a native unit takes --source, --tolerance, --passes and --band")
    return validate_native(path, source=source, tolerance=tolerance, passes=passes, band=band)
