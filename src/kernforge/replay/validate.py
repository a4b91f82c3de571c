"""Full validation of a candidate variant: every gate a reported speedup must pass.

``validate(recording, variant)`` runs, in order (docs/integrity.md):

1. static checks on the candidate's source and options              -> ``static:*``
2. compile, then the sanitizers, once each (:mod:`.sanitize`)        -> ``sanitizer:*``
   then repeated verification against the recorded epilogue          -> ``verify:*``
3. poisoned outputs, differential against the recorded kernel        -> ``poison:*``
4. fresh random inputs, differential against the recorded kernel     -> ``fresh:mismatch``
5. idle-device check, then the canonical re-measurement: the recorded kernel (A) against the
   candidate (B), interleaved, 7 passes (up to 21 while inconclusive), in the unit's cache
   state (flushed unless its protocol is warm: replay/cache_protocol.py), both verified after
   timing, the device watched for other load meanwhile
6. the roofline bound on the candidate's time, calibrated by the recorded kernel's time in
   the same interleaved run                                          -> ``roofline:exceeded``
7. the speed verdict (:mod:`kernforge.harness.verdict`): faster, not faster or inconclusive;
   inconclusive (busy, noisy) is neither accepted nor rejected   -> ``measure:inconclusive``
8. zero regression: rejected only when conclusively slower than the prior best of the case
   (the interval's upper end below it less the 2% band)              -> ``regression:*``
9. a claimed speedup the re-measurement does not confirm is downgraded -> ``remeasure:lower``

The outcome (:class:`Validation`) is appended to the ledger when one is given, and written as a
figure file with provenance when ``figure`` is given. Validation never raises for a candidate's
failure; bad arguments and unusable recordings raise as in :func:`replay`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import Backend, get_backend
from ..core import (
    BackendUnavailableError,
    BufferCheck,
    ConfigError,
    KernforgeError,
    Measurement,
    Recording,
    RecordingError,
    Status,
    Variant,
    WrongResultError,
)
from ..harness import ABResult
from ..harness.busy import combine, watch
from ..harness.integrity import IntegrityError, reason_for_status
from ..harness.ledger import DEFAULT_BAND, BaselineStore, Ledger, RegressionCheck, gate_regression
from ..harness.provenance import IdleCheck, idle_check, provenance, write_figure
from ..harness.roofline import RooflineCheck
from ..harness.verdict import Judgement, judge_ab, judge_evidence
from .cache_protocol import protocol_for
from .checks import Integrity, roofline_gate, run_checks
from .engine import compare
from .isolate import Isolation, backend_name
from .prepare import TolerancePolicy, resolve_policies

PathLike = str | os.PathLike[str]


@dataclass
class Validation:
    """The verdict on one candidate for one case: ``accepted``, ``downgraded`` (accepted, the
    figure is the re-measured one), ``rejected`` (``status``/``reason`` say by what) or
    ``inconclusive`` (every correctness gate passed, the speed verdict is inconclusive:
    neither accepted nor rejected). ``speed``: the speed verdict, printed by every command."""

    case: str
    variant: str
    verdict: str
    status: Status
    reason: str
    message: str = ""
    speedup: float | None = None
    ab: ABResult | None = None
    checks: tuple[BufferCheck, ...] = ()
    notes: dict[str, Any] = field(default_factory=dict)
    roofline: RooflineCheck | None = None
    regression: RegressionCheck | None = None
    idle: IdleCheck | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    speed: Judgement | None = None

    @property
    def accepted(self) -> bool:
        return self.verdict in ("accepted", "downgraded")

    @property
    def faster(self) -> bool:
        """Accepted, and the speed verdict is "faster": the only win that counts."""
        return self.accepted and self.speed is not None and self.speed.faster

    def to_json(self) -> dict[str, Any]:
        return {
            "case": self.case, "variant": self.variant, "verdict": self.verdict,
            "status": self.status.value, "reason": self.reason, "message": self.message,
            "speedup": self.speedup, "ab": self.ab.to_json() if self.ab else None,
            "failed_checks": [c.describe() for c in self.checks if not c.passed],
            "notes": self.notes,
            "roofline": self.roofline.to_json() if self.roofline else None,
            "regression": self.regression.to_json() if self.regression else None,
            "idle": self.idle.to_json() if self.idle else None,
            "speed": self.speed.to_json() if self.speed else None,
        }


def _rejected(case: str, key: str, exc: BaseException, notes: dict[str, Any]) -> Validation:
    if isinstance(exc, KernforgeError):
        status = exc.status or Status.RUNTIME_FAILED
        message = str(exc)
    else:
        status, message = Status.RUNTIME_FAILED, f"unexpected {type(exc).__name__}: {exc}"
    reason = exc.reason if isinstance(exc, IntegrityError) else reason_for_status(status)
    checks = exc.checks if isinstance(exc, IntegrityError) else ()
    return Validation(case, key, "rejected", status, reason, message, checks=checks,
                      notes=notes)


def _measure(recording: Recording, be: Backend, variant: Variant, tolerance: TolerancePolicy,
             integrity: Integrity, passes: int, per_pass: int, warmup: int,
             max_passes: int | None, band: float
             ) -> tuple[ABResult, RooflineCheck | None, IdleCheck]:
    seen = watch(be)
    try:
        ab = compare(recording, recording.variant, variant, backend=be, tolerance=tolerance,
                     passes=passes, per_pass=per_pass, warmup=warmup, flush=None,
                     max_passes=max_passes, band=band)
    except WrongResultError as exc:
        raise IntegrityError(exc.message, reason="verify:after-timing") from exc
    during = seen.result()
    roof = None
    if integrity.roofline:  # calibrated by the recorded kernel timed in this same run
        roof = roofline_gate(recording, be, ab.median_b, ab.median_a, integrity.slack)
    return ab, roof, during


def _regression(store: BaselineStore | None, case: str, be: Backend, speed: Judgement,
                band: float, record: dict[str, Any]) -> RegressionCheck:
    speedup = speed.speedup or 0.0
    upper = speed.ci[1] if speed.ci else None
    if store is None:
        return gate_regression(speedup, band=band, upper=upper)
    device = str(be.identity().get("device"))
    return store.check(case, device, speedup, band=band, record=record, upper=upper,
                       improve=speed.faster)


def _judge(v: Validation, regression: RegressionCheck | None, claimed: float | None,
           band: float) -> Validation:
    v.regression = regression
    speed = v.speed
    if speed is not None and not speed.conclusive:
        v.verdict, v.reason, v.message = "inconclusive", "measure:inconclusive", speed.reason
        if v.idle is not None and v.idle.idle is False:
            v.reason = "idle:busy"
    elif regression is not None and not regression.passed:
        v.verdict, v.reason = "rejected", "regression:prior-best"
        v.message = (f"speedup {regression.speedup:.4f} is conclusively below the prior best "
                     f"{regression.prior:.4f} ({regression.prior_source}) less {band:.0%}: "
                     f"{speed.reason if speed else ''}")
    elif claimed is not None and v.speedup is not None and v.speedup < claimed * (1 - band):
        v.verdict, v.reason = "downgraded", "remeasure:lower"
        v.message = (f"claimed {claimed:.4f}x, re-measured {v.speedup:.4f}x: the "
                     f"re-measured figure is reported")
    return v


def _speed(recording: Recording, be: Backend, variant: Variant, tolerance: TolerancePolicy,
           gates: Integrity, counts: tuple[int, int, int, int], band: float, idle: IdleCheck,
           checks: tuple[BufferCheck, ...], notes: dict[str, Any],
           names: tuple[str, str]) -> Validation:
    """The canonical re-measurement, the roofline and the speed verdict, as a Validation
    still to be judged against the prior best."""
    passes, per_pass, warmup, max_passes = counts
    ab, roof, during = _measure(recording, be, variant, tolerance, gates, passes, per_pass,
                                warmup, max_passes, band)
    seen = combine(idle, during) or idle
    notes["busy_during"] = during.to_json()
    speed = judge_ab(ab, idle=seen.idle, utilisation=seen.utilisation, band=band)
    return Validation(names[0], names[1], "accepted", Status.OK, "", speedup=ab.speedup,
                      ab=ab, checks=checks, notes=notes, roofline=roof, idle=seen, speed=speed)


def validate(recording: Recording, variant: Variant | None = None, *,
             backend: Backend | str | None = None, tolerance: TolerancePolicy = None,
             integrity: Integrity | None = None, passes: int = 7, per_pass: int = 3,
             warmup: int = 3, band: float = DEFAULT_BAND, claimed: float | None = None,
             baseline: BaselineStore | PathLike | None = None,
             ledger: Ledger | PathLike | None = None, figure: PathLike | None = None,
             require_idle: bool = False, command: Sequence[str] | None = None,
             case: str | None = None, isolate: Isolation | None = None,
             max_passes: int | None = None) -> Validation:
    """Run every gate on ``variant`` (default: the recorded one) of ``recording``; see the
    module docstring. ``claimed``: the speedup a search reported, to be confirmed.
    ``isolate``: run it in a supervised worker; a crash or a hang rejects the candidate.
    ``max_passes``: the passes the re-measurement may take while inconclusive (default 3x
    ``passes``). ``require_idle``: a busy device is reported before measuring (the verdict
    is inconclusive either way; kept for the command line)."""
    if isolate is not None:
        if isinstance(baseline, BaselineStore) or isinstance(ledger, Ledger):
            raise ConfigError("validate(isolate=...) takes the baseline store and the ledger "
                              "as paths", hint="pass their file paths")
        return isolate.validate(  # type: ignore[no-any-return]
            recording, variant, backend=backend_name(backend), tolerance=tolerance,
            integrity=integrity, passes=passes, per_pass=per_pass, warmup=warmup, band=band,
            claimed=claimed, baseline=baseline, ledger=ledger, figure=figure,
            require_idle=require_idle, command=command, case=case, max_passes=max_passes)
    gates = integrity or Integrity()
    be = get_backend(backend if backend is not None else recording.backend)
    variant = variant or recording.variant
    case = case or recording.name
    key = variant.key()
    store = baseline if isinstance(baseline, BaselineStore) or baseline is None \
        else BaselineStore(baseline)
    resolve_policies(recording, tolerance)  # a misnamed buffer is the caller's error: raise
    notes: dict[str, Any] = {"integrity": gates.to_json(),
                             "cache": protocol_for(recording).to_json()}
    t0 = time.perf_counter()
    try:
        report = run_checks(recording, be, variant, tolerance, gates)
        notes.update(report.notes)
        checks = report.checks
        del report  # free its buffers (the reference's are scrubbed) before re-measuring
        idle = idle_check(be)
        if require_idle and idle.idle is False:
            v = Validation(case, key, "accepted", Status.OK, "", checks=checks, notes=notes,
                           idle=idle, speed=judge_evidence(None, None, idle=False, band=band,
                                                           utilisation=idle.utilisation))
            _judge(v, None, None, band)
        else:
            v = _speed(recording, be, variant, tolerance, gates, (passes, per_pass, warmup,
                       max_passes if max_passes is not None else 3 * passes), band, idle, checks,
                       notes, (case, key))
            if v.speed is not None and v.speed.conclusive:
                record = {"variant": key, "median_s": v.ab.median_b if v.ab else None,
                          "baseline_s": v.ab.median_a if v.ab else None}
                _judge(v, _regression(store, case, be, v.speed, band, record), claimed, band)
            else:
                _judge(v, None, claimed, band)
    except (RecordingError, BackendUnavailableError):
        raise  # not the candidate's failure
    except Exception as exc:  # noqa: BLE001 - every candidate failure is a verdict
        v = _rejected(case, key, exc, notes)
    v.notes["seconds"] = time.perf_counter() - t0
    v.provenance = provenance(be, command=command)
    publish(v, ledger, figure)
    return v


def lost_validation(case: str, key: str, m: Measurement, ledger: Ledger | PathLike | None,
                    figure: PathLike | None) -> Validation:
    """The verdict on a candidate that killed its worker or ran past its limit."""
    reason = dict(m.extra).get("reason", reason_for_status(m.status))
    v = Validation(case, key, "rejected", m.status, str(reason), m.message,
                   notes={"cause": dict(m.extra).get("cause")})
    publish(v, ledger, figure)
    return v


def publish(v: Validation, ledger: Ledger | PathLike | None, figure: PathLike | None) -> None:
    """Append ``v`` to ``ledger`` and write it as ``figure`` (each when given)."""
    if ledger is not None:
        book = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        prov = {k: v.provenance.get(k) for k in ("command", "kernforge_version", "git",
                                                  "device", "date")}
        book.append({"case": v.case, "variant": v.variant, "verdict": v.verdict,
                     "status": v.status.value, "reason": v.reason, "message": v.message,
                     "speedup": v.speedup, "figure": str(figure) if figure else None,
                     "provenance": prov})
    if figure is not None:
        raw = {"samples_a": [list(p) for p in v.ab.samples_a] if v.ab else [],
               "samples_b": [list(p) for p in v.ab.samples_b] if v.ab else []}
        write_figure(Path(figure), {"kind": "validation", **v.to_json()}, raw, v.provenance)
