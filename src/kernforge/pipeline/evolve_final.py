"""The end of an evolution run: the winner re-measured against the recorded kernel (interleaved;
every integrity gate of :mod:`kernforge.replay.validate`) and written as a tuning-style
``result.json`` that ``kernforge export`` turns into a deployment spec.

The winner's speed has one of the three verdicts (:mod:`kernforge.harness.verdict`): only
"faster" is a win; "not faster" is kept as measured, not exported; "inconclusive" (a busy or
noisy machine) is neither a win nor a rejection: status ``INCONCLUSIVE``, with the reason and
what to do. ``REJECTED`` is left to an integrity gate (wrong results, a suspect time, a
conclusive regression)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._version import __version__
from ..core import Variant
from ..core.jsonio import sign, write_json_atomic
from ..evolve.controller import RunResult
from ..evolve.store import Store
from ..evolve.types import Program
from ..harness import ABResult
from ..harness.verdict import Judgement, ci_label, judge_ab
from ..replay.tuning import RESULT_FORMAT, RESULT_VERSION, variant_json
from ..replay.validate import Validation, validate
from .evolve_eval import EvolveTarget


@dataclass
class Final:
    best: Program | None
    config: dict[str, Any]
    variant: Variant | None
    ab: ABResult | None
    speedup: float
    # OK | INCONCLUSIVE | REJECTED | NOT_VALIDATED | NO_VALID_PROGRAM | UNCHANGED
    status: str
    message: str
    validation: dict[str, Any] | None
    result_json: Path | None
    measured: ABResult | None = None  # the validation's interleaved measurement, kept or not
    speed: Judgement | None = None  # the speed verdict of that measurement

    @property
    def faster(self) -> bool:
        """Verified, and the speed verdict is "faster": the only outcome that is a win."""
        return self.status == "OK" and self.speed is not None and self.speed.faster

    @property
    def counted(self) -> float:
        """The speedup a summary may count: the measured one of a win, else 1.0 (the
        recorded kernel stays)."""
        return self.speedup if self.faster else 1.0


def measurement_text(f: Final) -> str:
    """The one wording of an evolution's final measurement (the command, report.md and the
    demo print this): the verdict and its reason, with the interleaved figure whenever one
    was taken, whatever the verdict."""
    m = f.ab or f.measured
    if m is None:
        return f"{f.status}, no interleaved measurement ({f.message or 'none taken'})"
    figure = (f"interleaved speedup {m.speedup:.3f}x [{ci_label(m.confidence)} "
              f"{m.ci_low:.3f}, {m.ci_high:.3f}] over the recorded kernel")
    speed = f.speed
    if f.status == "OK" and speed is not None:
        if speed.faster:
            return f"{speed.verdict.value}: {figure}; a win (kernforge export)"
        return f"{speed.verdict.value}: {figure}; {speed.reason}; not exported"
    if f.status == "INCONCLUSIVE":
        why = speed.reason if speed is not None else f.message
        return f"inconclusive: {figure}; {why}; neither a win nor rejected, not exported"
    if f.ab is not None:
        return f"{f.status}, {figure}"
    return f"{f.status}: {f.message}; {figure}, not counted (speedup counted: {f.speedup:.3f}x)"


def iteration_of(store: Store, program_id: str) -> int:
    row = store.conn.execute("SELECT iteration FROM programs WHERE id=?",
                             (program_id,)).fetchone()
    return int(row[0]) if row else -1


@dataclass(frozen=True)
class Checked:
    """What the end-of-run validation found (see :func:`_validate`)."""

    ab: ABResult | None  # the accepted measurement
    measured: ABResult | None  # the measurement, whatever the verdict
    validation: dict[str, Any] | None
    message: str  # why it was not accepted ("" when it was)
    status: str  # OK | INCONCLUSIVE | REJECTED
    speed: Judgement | None


def _validate(target: EvolveTarget, variant: Variant, run_dir: Path, passes: int,
              claimed: float | None) -> Checked:
    """Every integrity gate (replay.validate); there is no weaker fallback. An inconclusive
    speed verdict is ``INCONCLUSIVE``, never ``REJECTED``."""
    rec = target.primary
    return checked(validate(rec, variant, backend=target.backend, tolerance=target.tolerance,
                            passes=passes, claimed=claimed, ledger=run_dir / "ledger.jsonl",
                            isolate=target.isolate))


def checked(v: Validation) -> Checked:
    """The outcome of one validation as the evolution reports it: OK (accepted: its speed
    verdict says whether it is a win), INCONCLUSIVE (the speed verdict, never a rejection) or
    REJECTED (an integrity gate, or a conclusive regression)."""
    speed = v.speed if v.speed is not None or v.ab is None else judge_ab(v.ab)
    status = ("OK" if v.accepted else "INCONCLUSIVE" if v.verdict == "inconclusive"
              else "REJECTED")
    return Checked(v.ab if v.accepted else None, v.ab, v.to_json(),
                    "" if v.accepted else f"{v.reason}: {v.message}", status, speed)


def finalize(target: EvolveTarget, result: RunResult, store: Store, run_dir: Path, *,
             validate_winner: bool = True, repeat: int = 5, passes: int = 7) -> Final:
    best = result.best
    if best is None:
        final = Final(None, {}, None, None, 1.0, "NO_VALID_PROGRAM",
                      "no program passed every recording", None, None)
        return final
    ev = store.evaluation(iteration_of(store, best.id))
    config = dict(ev.config) if ev else {}
    variant = target.realize(target.primary, best.code, config)
    if variant.key() == target.primary.variant.key():
        final = Final(best, config, variant, None, 1.0, "UNCHANGED",
                      "the recorded kernel stayed the best", None, None)
    else:
        seed_fit = result.seed.fitness
        claimed = seed_fit / best.fitness if seed_fit and best.fitness else None
        c = (_validate(target, variant, run_dir, passes, claimed) if validate_winner
             else Checked(None, None, None, "not validated", "NOT_VALIDATED", None))
        final = Final(best, config, variant, c.ab, c.ab.speedup if c.ab else 1.0, c.status,
                      c.message, c.validation, None, c.measured, c.speed)
    final.result_json = write_result(target, result, final, run_dir)
    (run_dir / "best.src").write_text(best.code)
    return final


def write_result(target: EvolveTarget, result: RunResult, f: Final, run_dir: Path) -> Path:
    """``run_dir/<unit>/result.json`` in the format of :func:`kernforge.replay.tuning.write_result`."""
    rec = target.primary
    ab = f.ab
    data = {
        "format": RESULT_FORMAT, "schema_version": RESULT_VERSION,
        "kernforge_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "unit": rec.name, "recording": str(Path(rec.path).resolve()),
        "backend": rec.backend, "sampler": "evolve", "preset": target.preset,
        "evaluations": len(result.programs), "trials": result.iterations,
        "stop_reason": result.stop_reason,
        "status": "OK" if f.status in ("OK", "UNCHANGED") else f.status,
        "best": {"config": f.config, "program": f.best.id if f.best else None,
                 "variant": variant_json(f.variant or rec.variant, rec.variant)},
        "baseline_median_s": ab.median_a if ab else None,
        "best_median_s": ab.median_b if ab else None,
        "speedup": f.speedup,
        "speedup_ci": [ab.ci_low, ab.ci_high] if ab else None,
        "interleaved": ab.to_json() if ab else None,
        "validation": f.validation, "message": f.message,
        "speed": f.speed.to_json() if f.speed is not None else None,
    }
    directory = run_dir / rec.name
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "result.json"
    write_json_atomic(path, sign(data))  # signed: export refuses a result edited after this
    return path
