"""``kernforge evolve``'s work on any units: the source of native units' kernels (captured
NVRTC source, or a bound ``--source`` file: :mod:`.native_evolve`) when the path holds native
units, else the recordings' kernels (:mod:`.evolve`). What is shown while it runs is the
caller's (:class:`EvolveDisplay`); what it found is returned (:class:`EvolveRun`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..backends.image_build import bind_source
from ..core import ConfigError
from ..core.lock import directory_lock
from ..core.native import NativeRecording
from ..evolve.controller import Progress
from ..replay.native_tune import RESULT
from .evolve import Counters, EvolveOutcome, evolve_path
from .evolve_config import RunConfig
from .loading import load_native, load_units
from .native_evolve import NativeEvolveOutcome, evolve_native
from .native_units import bind_units
from .notes import QUIET, Notes


class NativeEvolveSteps(Protocol):
    def finished(self, name: str, result: Path) -> None:
        """The kernel ``name``'s run finished earlier: ``result`` stands."""

    def started(self, name: str, launches: int) -> None:
        """The kernel ``name`` (``launches`` recorded launches) starts."""

    def progress(self, entry: str, p: Progress, c: Counters) -> None:
        """The run of ``entry`` goes on."""

    def evolved(self, o: NativeEvolveOutcome) -> None:
        """The kernel's run ended."""


class RecordingEvolveSteps(Protocol):
    def kernel_started(self, name: str, n: int) -> None:
        """The kernel ``name`` (``n`` recordings) starts."""

    def update(self, p: Progress, c: Counters) -> None:
        """Its run goes on."""


class EvolveDisplay(Protocol):
    def native(self) -> AbstractContextManager[NativeEvolveSteps]:
        """The display around the native kernels' runs."""

    def recordings(self) -> AbstractContextManager[RecordingEvolveSteps]:
        """The display around the recordings' runs."""


@dataclass
class EvolveRun:
    """``native``: the native kernels evolved now; ``outcomes``: the recordings' kernels
    evolved now; ``finished``: the result.json of recordings' kernels that ``--resume`` found
    finished earlier."""

    native: list[NativeEvolveOutcome] = field(default_factory=list)
    outcomes: list[EvolveOutcome] = field(default_factory=list)
    finished: list[Path] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        """Every kernel evolved now found a kept winner (native: a win over the recorded
        kernel; recordings: a best program)."""
        return all(o.tuning is not None and o.tuning.win for o in self.native) and \
            all(o.final.best is not None for o in self.outcomes)


def evolve_all(path: str | Path, cfg: RunConfig, out: Path, *, kernels: str | None,
               display: EvolveDisplay, isolation: Callable[[int], AbstractContextManager[Any]],
               resume: bool = False, remeasure: bool = False, tolerance: str | None = None,
               source: Path | None = None, includes: Sequence[str] = (),
               defines: Sequence[str] = (), notes: Notes = QUIET) -> EvolveRun:
    """Native units' kernels when ``path`` holds any matching ``kernels``, else the
    recordings' (``isolation(workers)``: the worker pool their candidates run in)."""
    native = load_native(path, kernels, notes)
    run = EvolveRun()
    if native:
        run.native = _native(native, cfg, out, kernels=kernels, display=display, resume=resume,
                             remeasure=remeasure, tolerance=tolerance, source=source,
                             includes=includes, defines=defines, notes=notes)
        return run
    if source is not None:
        raise ConfigError("--source binds native units; none under this path",
                          hint="record the program with kernforge record -- COMMAND")
    if tolerance is not None:  # it would be ignored: candidates verified bitwise regardless
        raise ConfigError(f"--tolerance {tolerance}: applies to native units; the recordings "
                          f"under {path} are verified under the tolerance each kernel "
                          f"declares (bitwise when none)",
                          hint="declare it where the kernel is made, e.g. kernforge.Kernel("
                               "..., tolerance={'y': 'rel:1e-6'}), record again, or drop "
                               "--tolerance")
    recs = load_units(path, notes=notes).recordings  # damaged units skipped, each named
    slots = cfg.evolve_config("").eval_slots
    with directory_lock(out, "evolution run directory"), isolation(slots) as iso, \
            display.recordings() as steps:
        run.outcomes = evolve_path(path, cfg, out, kernels=kernels, resume=resume,
                                   on_progress=steps.update, on_kernel=steps.kernel_started,
                                   isolate=iso if iso is not None else False, recordings=recs,
                                   remeasure=remeasure, on_finished=run.finished.append)
    return run


def _native(units: list[NativeRecording], cfg: RunConfig, out: Path, *, kernels: str | None,
            display: EvolveDisplay, resume: bool, remeasure: bool, tolerance: str | None,
            source: Path | None, includes: Sequence[str], defines: Sequence[str],
            notes: Notes) -> list[NativeEvolveOutcome]:
    """Native units: the kernel's captured NVRTC source, or the ``source`` file, evolved;
    without ``kernels``, the kernel with the longest time in the program only."""
    groups: dict[str, list[NativeRecording]] = {}
    for u in units:
        groups.setdefault(u.entry, []).append(u)
    src = bind_source(source, includes=includes, defines=defines) \
        if source is not None else None
    if src is not None:
        bound = bind_units(units, src, notes)
        groups = {k: g for k, g in groups.items() if g[0].path in bound}
    else:
        groups = {k: g for k, g in groups.items() if g[0].source is not None}
        if not groups:
            raise ConfigError("no native unit under this path carries source",
                              hint="kernels compiled with NVRTC carry theirs; for an "
                                   "nvcc-built program bind the file with --source FILE.cu")
    if kernels is None and len(groups) > 1:  # the kernel with the longest in-app time
        groups = dict([max(groups.items(), key=lambda kv: kv[1][0].capture.get(
            "app_time_ms") or 0.0)])
    done: list[NativeEvolveOutcome] = []
    with directory_lock(out, "evolution run directory"), display.native() as steps:
        for entry, group in groups.items():
            name = group[0].path.name.rsplit("-", 1)[0]
            result = out / name / RESULT
            if resume and not remeasure and result.is_file():
                steps.finished(group[0].name, result)
                continue
            steps.started(group[0].name, len(group))

            def shown(p: Progress, c: Counters, e: str = entry) -> None:
                steps.progress(e, p, c)

            o = evolve_native(group, cfg, out / name, source=src, resume=resume,
                              tolerance=tolerance, on_progress=shown, remeasure=remeasure)
            steps.evolved(o)
            done.append(o)
    return done
