"""``kernforge evolve``'s work on any units: the source of the kernels under a path evolved,
whatever recorded them: a recording's source (:mod:`.evolve`), or a native unit's captured
NVRTC source or bound ``--source`` file (:mod:`.native_evolve`), each candidate built by the
backend its unit needs. The kernels are grouped (one kernel's units together), one of them
picked without ``--kernels`` (the one under way on ``--resume``, else the hottest), and evolved
one after another in one loop; each writes its units' result.json in the format tuning writes.
What is shown while it runs is the caller's (:class:`EvolveDisplay`); what it found is
returned (:class:`EvolveRun`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..backends.image_build import bind_source
from ..core import ConfigError, Recording, Unit
from ..core.lock import directory_lock
from ..core.native import NativeRecording, NativeSource
from ..evolve.controller import Progress
from ..replay.tuning import finished_result
from .evolve import Counters, EvolveOutcome, evolve_kernel, group_by_kernel, replay_time
from .evolve_config import RunConfig
from .loading import load_units
from .native_evolve import NativeEvolveOutcome, evolve_native, finished_evolution
from .native_units import bind_units
from .notes import QUIET, Notes


class EvolveSteps(Protocol):
    def finished(self, name: str, result: Path) -> None:
        """The kernel ``name``'s run finished earlier: ``result`` stands."""

    def started(self, name: str, n: int) -> None:
        """The kernel ``name`` (``n`` recorded units) starts."""

    def update(self, p: Progress, c: Counters) -> None:
        """Its run goes on."""

    def evolved(self, outcome: Any) -> None:
        """Its run ended (an :class:`EvolveOutcome` or a :class:`NativeEvolveOutcome`)."""


class EvolveDisplay(Protocol):
    def units(self) -> AbstractContextManager[EvolveSteps]:
        """The display around the kernels' runs."""


@dataclass
class EvolveRun:
    """``outcomes``: the kernels evolved now, in order (a recording's kernel: an
    :class:`EvolveOutcome`, a native unit's: a :class:`NativeEvolveOutcome`); ``finished``:
    the results of kernels that ``--resume`` found finished earlier."""

    outcomes: list[Any] = field(default_factory=list)
    finished: list[Path] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        """Every kernel evolved now found a kept winner (native: a win over the recorded
        kernel; recordings: a best program)."""
        return all(o.won for o in self.outcomes)


@dataclass(frozen=True)
class _Kernel:
    """One kernel's units (the first primary), where its run lives, and the source bound to
    it (native units built from a ``--source`` file)."""

    units: list[Any]
    directory: str
    source: NativeSource | None = None

    @property
    def native(self) -> bool:
        return isinstance(self.units[0], NativeRecording)

    def finished(self, out: Path) -> Path | None:
        first = self.units[0]
        if self.native:
            return finished_evolution(out / self.directory, first.path.name)
        return finished_result(out / self.directory / first.name)

    def hotness(self) -> float:
        """The time of its primary launch: in the program when the recorder timed it, else
        replayed."""
        first = self.units[0]
        if first.in_program_s is not None:
            return float(first.in_program_s)
        return replay_time(self.units) if isinstance(first, Recording) else 0.0


def kernels_with_source(units: Sequence[Unit], kernels: str | None,
                        source: NativeSource | None, notes: Notes) -> dict[str, _Kernel]:
    """The kernels whose source is known, by run directory: recordings' by entry, native
    units' (captured source, or ``source`` bound to them) by unit name without its index."""
    out: dict[str, _Kernel] = {}
    native = [u for u in units if isinstance(u, NativeRecording) and u.matches(kernels)]
    if source is not None and not native:
        raise ConfigError("--source binds native units; none under this path",
                          hint="record the program with kernforge record -- COMMAND")
    bound = bind_units(native, source, notes) if source is not None else {}
    by_entry: dict[str, list[NativeRecording]] = {}
    for u in native:
        by_entry.setdefault(u.entry, []).append(u)
    for group in by_entry.values():
        if group[0].path in bound or (source is None and group[0].source is not None):
            out[group[0].path.name.rsplit("-", 1)[0]] = _Kernel(
                list(group), group[0].path.name.rsplit("-", 1)[0], bound.get(group[0].path))
    recs = [u for u in units if isinstance(u, Recording)]
    if any(r.matches(kernels) for r in recs) or (not native and source is None):
        out.update((k, _Kernel(list(g), k)) for k, g in group_by_kernel(recs, kernels).items())
    if not out:
        raise ConfigError("no native unit under this path carries source",
                          hint="kernels compiled with NVRTC carry theirs; for an "
                               "nvcc-built program bind the file with --source FILE.cu")
    return out


def pick(groups: dict[str, _Kernel], out: Path, *, kernels: str | None,
         resume: bool) -> dict[str, _Kernel]:
    """Without ``kernels``: the kernel(s) under way in ``out`` on ``resume`` (timings change
    between runs, so the hottest is not picked again), else the hottest; all with it."""
    if kernels is not None or len(groups) < 2:
        return groups
    started = {k: g for k, g in groups.items() if (out / k / "evolve.db").exists()} \
        if resume else {}
    if started:
        return started
    name = max(groups, key=lambda k: groups[k].hotness())
    return {name: groups[name]}


def evolve_all(path: str | Path, cfg: RunConfig, out: Path, *, kernels: str | None,
               display: EvolveDisplay, isolation: Callable[[int], AbstractContextManager[Any]],
               resume: bool = False, remeasure: bool = False, tolerance: str | None = None,
               source: Path | None = None, includes: Sequence[str] = (),
               defines: Sequence[str] = (), notes: Notes = QUIET) -> EvolveRun:
    """The kernels under ``path`` with source, evolved one after another
    (``isolation(workers)``: the worker pool the candidates of recordings run in)."""
    units = load_units(path, notes=notes)  # damaged units skipped, each named
    src = bind_source(source, includes=includes, defines=defines) \
        if source is not None else None
    groups = pick(kernels_with_source(units.every, kernels, src, notes), out,
                  kernels=kernels, resume=resume)
    pool = any(not g.native for g in groups.values())
    if tolerance is not None and pool:  # it would be ignored: recordings declare their own
        raise ConfigError(f"--tolerance {tolerance}: applies to native units; the recordings "
                          f"under {path} are verified under the tolerance each kernel "
                          f"declares (bitwise when none)",
                          hint="declare it where the kernel is made, e.g. kernforge.Kernel("
                               "..., tolerance={'y': 'rel:1e-6'}), record again, or drop "
                               "--tolerance")
    run = EvolveRun()
    with directory_lock(out, "evolution run directory"), \
            (isolation(cfg.evolve_config("").eval_slots) if pool else nullcontext()) as iso, \
            display.units() as steps:
        for name, g in groups.items():
            done = g.finished(out) if resume else None
            if done is not None and not remeasure:
                steps.finished(g.units[0].name, done)
                run.finished.append(done)
                continue
            steps.started(name, len(g.units))
            if g.native:
                o: EvolveOutcome | NativeEvolveOutcome = evolve_native(
                    g.units, cfg, out / name, source=g.source, resume=resume,
                    tolerance=tolerance, on_progress=steps.update, remeasure=remeasure)
            else:
                o = evolve_kernel(g.units, cfg, out / name, resume=resume,
                                  on_progress=steps.update,
                                  isolate=iso if iso is not None else False,
                                  remeasure=remeasure)
            steps.evolved(o)
            run.outcomes.append(o)
    return run
