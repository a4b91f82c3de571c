"""``kernforge integrity validate`` on a native unit (one launch or a sequence).

Without a candidate, the recorded kernel is replayed in a child process at the recorded
addresses and must leave every region as recorded (for a sequence: every launch in order, every
buffer it leaves, the intermediate time levels included), bitwise or under ``--tolerance``. With
``--source FILE``, FILE's code replaces the unit's source (captured from NVRTC, or bound with
``kernforge tune --source``) and is built as tuning builds it; the candidate must verify the same
way, then it is compared with the recorded kernel interleaved and accepted only through the
gate every deployment passes (:func:`kernforge.deploy.gate.refusal`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..core import ConfigError, Measurement, Status
from ..core.fmt import fmt_time
from ..core.native import NativeBuild
from ..deploy.gate import NOISE_BAND, refusal
from ..harness.verdict import ci_label
from ..record.native_format import read_native
from .native import NativeVariant
from .native_child import run_isolated

EXIT_ACCEPTED, EXIT_WRONG, EXIT_REJECTED = 0, 5, 6


@dataclass
class NativeValidation:
    unit: Path
    accepted: bool
    reason: str
    measurements: list[Measurement]
    speedup: float | None = None
    ci: tuple[float, float] | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        if self.accepted:
            return EXIT_ACCEPTED
        return EXIT_WRONG if any(m.status is Status.WRONG_RESULT
                                 for m in self.measurements) else EXIT_REJECTED


def _tolerance(specs: list[str] | None) -> str | None:
    if not specs:
        return None
    if len(specs) > 1 or "=" in specs[0].split(":", 1)[0]:
        raise ConfigError(f"--tolerance {' '.join(specs)}: a native unit takes one SPEC for "
                          "all its memory (no BUF=)", hint="e.g. --tolerance rel:1e-6")
    return specs[0]


def validate_native(unit: str | Path, *, source: str | Path | None = None,
                    tolerance: list[str] | None = None, passes: int = 7,
                    band: float = NOISE_BAND, repeat: int = 10) -> NativeValidation:
    unit = Path(unit)
    rec = read_native(unit, verify=True)
    tol = _tolerance(tolerance)
    what = (f"a sequence of {len(rec.steps)} launches ({rec.sequence.get('steps')} of "
            f"{rec.name}, ended: {rec.sequence.get('ended')})" if rec.is_sequence
            else f"one launch of {rec.name}")
    variants = [NativeVariant()]
    if source is not None:
        if rec.source is None:
            raise ConfigError(f"{unit}: the unit carries no source for --source to replace",
                              hint="bind its file with kernforge tune --source FILE.cu, or "
                                   "validate the recorded kernel (no --source)")
        try:
            code = Path(source).read_text("utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {source}: {exc}",
                              hint="give the path of the candidate's source file") from None
        variants.append(NativeVariant(build=NativeBuild(source=rec.source, code=code)))
    out = run_isolated(unit, variants, repeat=repeat, tolerance=tol, passes=passes,
                       compare_pair=(0, 1) if len(variants) == 2 else None)
    ms: list[Measurement] = out["measurements"]
    lines = [f"{unit.name}: {what}; {len(rec.regions)} region(s) verified "
             + (f"under {tol}" if tol else "bitwise")]
    for label, m in zip(("recorded", "candidate"), ms):
        lines.append(f"  {label}: {m.status.value}"
                     + (f" {fmt_time(m.median)}" if m.status.ok and m.samples else "")
                     + (f" ({m.message})" if m.message else ""))
    bad = next((m for m in ms if not m.status.ok), None)
    if bad is not None:
        return NativeValidation(unit, False, f"{bad.status.value}: {bad.message}", ms,
                                lines=lines + ["  REJECTED"])
    if len(ms) == 1:
        return NativeValidation(unit, True, "the recorded kernel reproduces the recorded state",
                                ms, lines=lines + ["  ACCEPTED"])
    cmp = out.get("compare") or {}
    speedup, ci = cmp.get("speedup"), tuple(cmp.get("ci") or ()) or None
    why = refusal(verified=True, idle=None, speedup=speedup, ci=ci,  # type: ignore[arg-type]
                  band=band)
    lines.append(f"  speedup {speedup:.3f}x, {ci_label(cmp.get('confidence'))} "
                 f"[{ci[0]:.3f}, {ci[1]:.3f}]"
                 if speedup is not None and ci else "  no comparison")
    lines.append("  ACCEPTED" if why is None else f"  REJECTED: {why}")
    return NativeValidation(unit, why is None, why or "faster through the gate", ms,
                            speedup, ci, lines)  # type: ignore[arg-type]
