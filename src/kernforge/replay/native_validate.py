"""``kernforge integrity validate`` on a native unit (one launch or a sequence).

Without a candidate, the recorded kernel is replayed in a child process at the recorded
addresses and must leave every region as recorded (for a sequence: every launch in order, every
buffer it leaves, the intermediate time levels included), bitwise or under ``--tolerance``. With
``--source FILE``, FILE's code replaces the unit's source (captured from NVRTC, or bound with
``kernforge tune --source``) and is built as tuning builds it; the candidate must verify the same
way, then it is compared with the recorded kernel interleaved (adaptive passes, the GPU's idle
check before and after: :mod:`.native_child`) and judged as every validation is
(:class:`~.validate.Validation`: accepted unless the speed verdict is inconclusive; the verdict,
faster or not, is part of it; exporting a win takes "faster").
"""

from __future__ import annotations

from pathlib import Path

from ..core import ConfigError, Measurement, Status, Tolerance
from ..core.fmt import fmt_time
from ..core.native import NativeBuild
from ..core.textfile import read_text_file
from ..deploy.gate import NOISE_BAND
from ..harness.compare import ABResult
from ..harness.integrity import reason_for_status
from ..record.native_format import read_native
from .native import NativeVariant
from .native_child import idle_of, judged, run_isolated
from .validate import Validation


def _said(m: Measurement) -> str:
    return (m.status.value + (f" {fmt_time(m.median)}" if m.status.ok and m.samples else "")
            + (f" ({m.message})" if m.message else ""))


def validate_native(unit: str | Path, *, source: str | Path | None = None,
                    tolerance: Tolerance | None = None, passes: int = 7,
                    band: float = NOISE_BAND, repeat: int = 10) -> Validation:
    """The verdict on the recorded kernel (no ``source``) or on ``source`` built in its place;
    ``notes`` say what was verified and how each side ran."""
    unit = Path(unit)
    rec = read_native(unit, verify=True)
    tol = tolerance
    what = (f"a sequence of {len(rec.steps)} launches ({rec.sequence.get('steps')} of "
            f"{rec.name}, ended: {rec.sequence.get('ended')})" if rec.is_sequence
            else f"one launch of {rec.name}")
    variants = [NativeVariant()]
    if source is not None:
        if rec.source is None:
            raise ConfigError(f"{unit}: the unit carries no source for --source to replace",
                              hint="bind its file with kernforge tune --source FILE.cu, or "
                                   "validate the recorded kernel (no --source)")
        code = read_text_file(source, hint="give the path of the candidate's source file")
        variants.append(NativeVariant(build=NativeBuild(source=rec.source, code=code)))
    out = run_isolated(unit, variants, repeat=repeat, tolerance=tol, passes=passes,
                       compare_pair=(0, 1) if len(variants) == 2 else None)
    ms: list[Measurement] = out["measurements"]
    notes: dict[str, str] = {
        "unit": what, "verified": f"{len(rec.regions)} region(s) "
                                  + (f"under {tol.spec()}" if tol else "bitwise")}
    notes.update((label, _said(m)) for label, m in zip(("recorded", "candidate"), ms))
    case, variant = unit.name, "candidate" if source is not None else "recorded"
    bad = next((m for m in ms if not m.status.ok), None)
    if bad is not None:
        return Validation(case, variant, "rejected", bad.status, reason_for_status(bad.status),
                          bad.message, checks=bad.checks, notes=notes)
    if len(ms) == 1:
        return Validation(case, variant, "accepted", Status.OK, "",
                          "the recorded kernel reproduces the recorded state", notes=notes)
    cmp = out.get("compare") or {}
    if "ab" not in cmp:
        return Validation(case, variant, "rejected", Status.RUNTIME_FAILED,
                          reason_for_status(Status.RUNTIME_FAILED),
                          "the interleaved comparison did not run", notes=notes)
    ab = ABResult.from_json(cmp["ab"])
    idle = idle_of(cmp)
    speed = judged(cmp, band)  # as every validation: accepted unless inconclusive
    if not speed.conclusive:
        busy = idle is not None and idle.idle is False
        return Validation(case, variant, "inconclusive", Status.OK,
                          "idle:busy" if busy else "measure:inconclusive", speed.reason,
                          speedup=ab.speedup, ab=ab, notes=notes, idle=idle, speed=speed)
    return Validation(case, variant, "accepted", Status.OK, "", speedup=ab.speedup, ab=ab,
                      notes=notes, idle=idle, speed=speed)
