"""The end of an evolution run: the winner re-measured against the recorded kernel (interleaved;
every integrity gate when :mod:`kernforge.replay.validate` is present) and exported as a
tuning-style ``result.json`` that ``kernforge export`` turns into a deployment spec."""

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
from ..replay.tuning import RESULT_FORMAT, RESULT_VERSION, variant_json
from ..replay.validate import validate
from .evolve_eval import EvolveTarget


@dataclass
class Final:
    best: Program | None
    config: dict[str, Any]
    variant: Variant | None
    ab: ABResult | None
    speedup: float
    status: str  # OK | REJECTED | NO_VALID_PROGRAM | UNCHANGED
    message: str
    validation: dict[str, Any] | None
    result_json: Path | None
    measured: ABResult | None = None  # the validation's interleaved measurement, kept or not


def measurement_text(f: Final) -> str:
    """The one wording of an evolution's final measurement (the command, report.md and the
    demo print this): the interleaved figure whenever one was taken, accepted or not."""
    m = f.ab or f.measured
    if m is None:
        return f"{f.status}, no interleaved measurement ({f.message or 'none taken'})"
    figure = (f"interleaved speedup {m.speedup:.3f}x [95% CI {m.ci_low:.3f}, {m.ci_high:.3f}] "
              f"over the recorded kernel")
    if f.ab is not None:
        return f"{f.status}, {figure}"
    return f"{f.status}: {f.message}; {figure}, not counted (speedup counted: {f.speedup:.3f}x)"


def iteration_of(store: Store, program_id: str) -> int:
    row = store.conn.execute("SELECT iteration FROM programs WHERE id=?",
                             (program_id,)).fetchone()
    return int(row[0]) if row else -1


def _validate(target: EvolveTarget, variant: Variant, run_dir: Path, passes: int,
              claimed: float | None
              ) -> tuple[ABResult | None, ABResult | None, dict[str, Any] | None, str]:
    """Every integrity gate (replay.validate); there is no weaker fallback. The accepted
    measurement, the measurement whatever the verdict, the validation and why it refused."""
    rec = target.primary
    v = validate(rec, variant, backend=target.backend, tolerance=target.tolerance,
                 passes=passes, claimed=claimed, ledger=run_dir / "ledger.jsonl",
                 isolate=target.isolate)
    return (v.ab if v.accepted else None), v.ab, v.to_json(), \
        ("" if v.accepted else f"{v.reason}: {v.message}")


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
        ab, measured, validation, msg = (_validate(target, variant, run_dir, passes, claimed)
                                         if validate_winner
                                         else (None, None, None, "not validated"))
        ok = ab is not None
        final = Final(best, config, variant, ab, ab.speedup if ab else 1.0,
                      "OK" if ok else "REJECTED" if validate_winner else "NOT_VALIDATED", msg,
                      validation, None, measured)
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
    }
    directory = run_dir / rec.name
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "result.json"
    write_json_atomic(path, sign(data))  # signed: export refuses a result edited after this
    return path
