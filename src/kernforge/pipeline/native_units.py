"""Native units (launches the driver interposer recorded from unchanged programs) bound to a
``--source`` file and tuned, one unit at a time in the loop every unit is tuned in
(:mod:`.tune_run`). Each unit runs in a child process (:mod:`kernforge.replay.native_child`),
so a crash costs that unit only."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..backends.image_build import BindingError
from ..core import ConfigError, Tolerance
from ..core.native import NativeRecording, NativeSource
from ..deploy.gate import NOISE_BAND
from ..harness.plots import tuning_png
from ..replay.native_result import write_unit_result
from ..replay.native_share import share_winners
from ..replay.native_tune import NativeTuning, bind, tune_native
from ..replay.tuning import RESULT_NAME, finished_result, history_points, keep_earlier
from ..tune import Budget, TrialRecord
from .notes import QUIET, Notes


def bind_units(recs: Sequence[NativeRecording], src: NativeSource,
               notes: Notes = QUIET) -> dict[Path, NativeSource]:
    """The units ``src`` (``--source``) builds: each probed once; a file that builds none of
    them, or builds one wrongly, is a BindingError."""
    bound = {}
    for rec in recs:
        notes.say(f"binding {src.program} to {rec.path.name} ({rec.name[:60]})")
        if bind(rec.path, rec, src):
            bound[rec.path] = src
    if not bound:
        raise BindingError(f"{src.program} defines none of the recorded kernels "
                           f"({', '.join(sorted({r.entry for r in recs})[:6])})",
                           hint="bind the file that defines the kernel (--kernels selects "
                                "the units), with the same name and parameter types")
    return bound


def tune_native_unit(rec: NativeRecording, out: Path, *, repeat: int, passes: int,
                     sampler: str = "exhaustive", budget: Budget | None = None,
                     seed: int | None = 0, resume: bool = False, remeasure: bool = False,
                     band: float = NOISE_BAND, tolerance: Tolerance | None = None,
                     source: NativeSource | None = None,
                     defines: Sequence[Sequence[tuple[str, str]]] = (),
                     on_trial: Callable[[TrialRecord], None] | None = None) -> NativeTuning:
    """Tune one native unit by its study in OUT/<unit>/ (``sampler`` under ``budget``;
    ``resume`` continues the study there), with ``source`` bound to it when given and the
    ``defines`` sets tried on every source build; its signed result written to
    OUT/<unit>/result.json (an earlier one kept beside it). A study there without ``resume``
    is a ConfigError, as a finished result without ``remeasure``, as for every unit."""
    directory = out / rec.path.name
    if (directory / "study.db").exists() and not (resume or remeasure):
        raise ConfigError(f"{directory} already holds a study",
                          hint="pass --resume to continue it, or choose another --out")
    if finished_result(directory) is not None and not remeasure:
        raise ConfigError(f"{directory}: the tuning of {rec.path.name} finished; its "
                          f"{RESULT_NAME} stands and is not measured again",
                          hint="pass --remeasure to measure it again (the earlier result is "
                               "kept beside the new one)")
    directory.mkdir(parents=True, exist_ok=True)
    src = source or rec.source
    t = tune_native(rec.path, rec, repeat=repeat, passes=passes, band=band,
                    sampler=sampler, budget=budget, seed=seed, storage=directory,
                    tolerance=tolerance, source=source, defines=defines if src else (),
                    on_trial=on_trial)
    keep_earlier(directory / RESULT_NAME)
    write_unit_result(t, out, band)
    _history(t, directory / "history.png")
    return t


def _history(t: NativeTuning, path: Path) -> None:
    """history.png of the unit's study, as every unit's tuning draws it: one point per
    evaluation, the best so far, the recorded configuration at its median; the title the
    interleaved figure and whether the gate kept the winner."""
    if t.study is None:
        return
    points, hits = history_points(t.study)
    base = t.results[0].median if t.results and t.results[0].ok else None
    if t.speedup is not None and t.ci is not None:
        figure = (f"interleaved speedup {t.speedup:.3f}x [CI {t.ci[0]:.3f}, {t.ci[1]:.3f}], "
                  f"best vs recorded: " + ("kept" if t.win else f"not kept: {t.refused}"))
    else:
        figure = f"not kept: {t.refused}" if t.refused else "the recorded configuration stayed"
    device = t.rec.identity.get("device", "?")
    tuning_png(path, points, recorded_s=base, cache_hits=hits,
               title=f"{t.unit.name} ({t.sampler}, {device}):\n{figure[:160]}")


def share_native_winners(done: Sequence[NativeTuning], out: Path, *, repeat: int, passes: int,
                         band: float = NOISE_BAND, tolerance: Tolerance | None = None,
                         notes: Notes = QUIET) -> None:
    """One winner for the tuned launches of a kernel that differ only in scalars, where it
    passes (:func:`kernforge.replay.native_share.share_winners`); their results rewritten."""
    if share_winners(done, band=band, passes=passes, repeat=repeat,
                     tolerance=tolerance, say=notes.say):
        for t in done:
            write_unit_result(t, out, band)
