"""Native units (launches the driver interposer recorded from unchanged programs) bound to a
``--source`` file and tuned (loaded, described, replayed and validated as every unit is:
:mod:`.loading`, :mod:`.units`). Each unit runs in a child process
(:mod:`kernforge.replay.native_child`), so a crash costs that unit only."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..backends.image_build import BindingError
from ..core import ConfigError, RecordingError, Tolerance
from ..core.native import NativeRecording, NativeSource
from ..deploy.gate import NOISE_BAND, refusal
from ..replay.native_result import write_unit_result
from ..replay.native_share import share_winners
from ..replay.native_tune import NativeTuning, bind, tune_native
from ..replay.tuning import RESULT_NAME, keep_earlier
from ..tune import Budget
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


def tune_native_units(recs: Sequence[NativeRecording], out: Path, *, repeat: int, passes: int,
                      sampler: str = "exhaustive", budget: Budget | None = None,
                      seed: int | None = 0, resume: bool = False, band: float = NOISE_BAND,
                      tolerance: Tolerance | None = None, source: NativeSource | None = None,
                      defines: Sequence[Sequence[tuple[str, str]]] = (),
                      others: bool = False, notes: Notes = QUIET) -> list[NativeTuning]:
    """Tune every native unit, each by its study in OUT/<unit>/ (``sampler`` under ``budget``;
    ``resume`` continues the studies there), with ``source`` bound to those it builds and the
    ``defines`` sets tried on every source build; write each signed result to
    OUT/<unit>/result.json (an earlier one there kept beside it). A unit whose data turns out
    damaged is skipped (``notes.damaged``) while
    others remain (``others``: units of another kind are tuned too); with none left, its
    RecordingError is raised."""
    out.mkdir(parents=True, exist_ok=True)
    held = [r.path.name for r in recs if (out / r.path.name / "study.db").exists()]
    if held and not resume:
        raise ConfigError(f"{out / held[0]} already holds a study",
                          hint="pass --resume to continue it, or choose another --out")
    done: list[NativeTuning] = []
    damaged: list[RecordingError] = []
    bound = bind_units(recs, source, notes) if source is not None else {}

    def refuse(speedup: float, ci: tuple[float, float]) -> str | None:
        return refusal(verified=True, idle=None, speedup=speedup, ci=ci, band=band)

    for i, rec in enumerate(recs, 1):
        src = bound.get(rec.path) or rec.source
        notes.say(f"{i}/{len(recs)} tuning native {rec.path.name} ({rec.name[:60]})"
                  + (f", source: {src.origin} {src.program}" if src else ""))
        try:
            t = tune_native(rec.path, rec, repeat=repeat, passes=passes, refuse=refuse,
                            sampler=sampler, budget=budget, seed=seed,
                            storage=out / rec.path.name, tolerance=tolerance,
                            source=bound.get(rec.path), defines=defines if src else ())
        except RecordingError as exc:
            damaged.append(exc)
            continue
        notes.say(f"  {len(t.results)} configurations evaluated ({sampler})")
        done.append(t)
        keep_earlier(out / rec.path.name / RESULT_NAME)
        write_unit_result(t, out, band)
    if damaged and not done and not others:
        raise damaged[0]
    for bad in damaged:
        notes.damaged(bad)
    if share_winners(done, refuse=refuse, passes=passes, repeat=repeat, tolerance=tolerance,
                     say=notes.say):
        for t in done:
            write_unit_result(t, out, band)
    return done
