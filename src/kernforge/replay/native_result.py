"""A native unit's tuning result, in the one result format every unit's tuning writes:
``<run>/<unit>/result.json`` (format ``kernforge-tune-result``, :mod:`.tuning`), signed.

The fields every result has (the unit, its recording, ``backend``, the sampler, the study's
evaluations, trials and stop reason, ``status``, ``best``, the speedup with its interval and
the medians it comes from) are read by every consumer; a native unit's own (the candidates
evaluated, the winner's label, the gate's reason, its notes) are under ``native``, as a run's
``native.json`` held them before (:data:`.native_tune.RESULT`, still read by export).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .._version import __version__
from ..core.jsonio import sign, write_json_atomic
from .native_tune import NativeTuning
from .tuning import RESULT_FORMAT, RESULT_NAME, RESULT_VERSION
from .unit_replay import DRIVER


def unit_result(t: NativeTuning, band: float) -> dict[str, Any]:
    """The result document of ``t`` (unsigned)."""
    study = t.study
    best = None if t.best is None else t.variants[t.best]
    return {
        "format": RESULT_FORMAT, "schema_version": RESULT_VERSION,
        "kernforge_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "unit": t.unit.name, "recording": str(Path(t.unit).resolve()), "backend": DRIVER,
        "sampler": t.sampler, "noise_band": band,
        "evaluations": study.evaluations if study else len(t.results),
        "trials": len(study.trials) if study else len(t.results),
        "stop_reason": study.stop_reason if study else None,
        # OK: the unit was tuned (kept or not: ``native.refused`` says why not); NO_VALID_TRIAL:
        # the recorded configuration itself did not replay
        "status": "OK" if t.results and t.results[0].ok else "NO_VALID_TRIAL",
        "best": {"config": None, "variant": best.to_json() if best else None},
        "baseline_median_s": t.medians[0] if t.medians else None,
        "best_median_s": t.medians[1] if t.medians else None,
        "speedup": t.speedup if t.win else 1.0,
        "speedup_ci": list(t.ci) if t.win and t.ci else None,
        "native": t.to_json(),
    }


def write_unit_result(t: NativeTuning, run_dir: Path, band: float) -> Path:
    """``run_dir/<unit>/result.json``, signed (export refuses one edited after this)."""
    directory = run_dir / t.unit.name
    directory.mkdir(parents=True, exist_ok=True)
    return write_json_atomic(directory / RESULT_NAME, sign(unit_result(t, band)))


def is_native_result(doc: Any) -> bool:
    """Whether a result document is a native unit's (``backend`` driver, its ``native``
    part present)."""
    return isinstance(doc, dict) and doc.get("backend") == DRIVER \
        and isinstance(doc.get("native"), dict)
