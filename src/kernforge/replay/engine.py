"""The replay engine: restore ▸ compile ▸ run ▸ verify ▸ time one recorded launch.

``replay`` evaluates one variant of a recording and returns a :class:`Measurement`. A failing
*candidate* never raises: compile errors, invalid options or launch geometry, a changed
signature, crashes and wrong results all come back as a Status plus a message. What does raise
is trouble that is not the candidate's: bad arguments to ``replay`` itself (negative
``repeat``, a tolerance for a buffer the recording does not have), a backend that is unknown or
cannot run here, and a recording whose data cannot be read (RecordingError).

``integrity``: the cheap default (None / "basic") verifies one run before and the last run after
timing. ``"strict"`` (or an :class:`~kernforge.replay.checks.Integrity`) adds the integrity
gates: static checks on the source, repeated verification, poisoned outputs, fresh random
inputs (both against the recorded kernel) and the roofline bound (docs/integrity.md). Every
failure carries a reason code in ``Measurement.extra["reason"]``.

``compare`` measures two variants interleaved. A comparison with a failing side means nothing,
so there every failure raises its typed error (CompileError, ConfigError, ...;
WrongResultError naming the buffers and their errors when a side verifies wrong).
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from typing import Any

from ..backends import Backend, get_backend
from ..core import (
    BackendUnavailableError,
    BufferCheck,
    CompileError,
    ConfigError,
    KernelSource,
    KernforgeError,
    LaunchConfig,
    Measurement,
    Recording,
    RecordingError,
    Status,
    Variant,
    WrongResultError,
)
from ..core.strict import strict_keys
from ..harness import NOISE_BAND, ABResult, Protocol, interleave, median
from ..harness.integrity import IntegrityError, reason_for_status
from .cache_protocol import resolve as resolve_cache
from .checks import Integrity, roofline_gate, run_checks
from .isolate import Isolation, backend_name
from .prepare import Prepared, TolerancePolicy, check_reusable, prepare, resolve_policies

_OVERRIDE_KEYS = ("options", "defines", "launch", "source", "constants")
IntegrityLevel = Integrity | str | None


def integrity_of(level: IntegrityLevel) -> Integrity | None:
    """None for the cheap default ("basic"), the gates to run otherwise ("strict")."""
    if level is None or level == "basic":
        return None
    if isinstance(level, Integrity):
        return level
    if level == "strict":  # per candidate: the sanitizers are for winners (validate)
        return Integrity(sanitize=False)
    raise ConfigError(f"unknown integrity level {level!r}",
                      hint="use 'basic', 'strict' or an Integrity(...)")


def _failure(exc: BaseException, stages: list[tuple[str, float]]) -> Measurement:
    """A candidate failure as data: the error's Status (RUNTIME_FAILED when it has none)."""
    if isinstance(exc, KernforgeError):
        status = exc.status or Status.RUNTIME_FAILED
        message = exc.message
        if isinstance(exc, CompileError) and exc.log and exc.log not in message:
            message = f"{message}\n{exc.log}"
        if exc.hint:  # say what to do, as every kernforge error does
            message = f"{message}\n  hint: {exc.hint}"
        extra: tuple[tuple[str, Any], ...] = (("error", type(exc).__name__),)
        if exc.hint:
            extra += (("hint", exc.hint),)
    else:  # a backend let a foreign exception through: still the candidate's failure
        status = Status.RUNTIME_FAILED
        message = f"unexpected {type(exc).__name__}: {exc}"
        extra = (("error", type(exc).__name__),
                 ("traceback", "".join(traceback.format_exception(exc))))
    reason = exc.reason if isinstance(exc, IntegrityError) else reason_for_status(status)
    checks = exc.checks if isinstance(exc, IntegrityError) else ()
    return Measurement(status, message=message, stages=tuple(stages), checks=checks,
                       extra=extra + (("reason", reason),))


def _wrong(checks: tuple[BufferCheck, ...], what: str) -> str:
    bad = "; ".join(c.describe() for c in checks if not c.passed)
    return f"{what} fails verification: {bad}"


def _timed_run(prepared: Prepared, stages: list[tuple[str, float]]) -> None:
    t0 = time.perf_counter()
    prepared.restore()
    t1 = time.perf_counter()
    prepared.run_once()
    t2 = time.perf_counter()
    stages += [("restore", t1 - t0), ("run", t2 - t1)]


def _evaluate(recording: Recording, backend: Backend, variant: Variant,
              tolerance: TolerancePolicy, protocol: Protocol, verify_only: bool,
              stages: list[tuple[str, float]], state: Prepared | None = None) -> Measurement:
    prepared = prepare(recording, backend=backend, variant=variant, tolerance=tolerance,
                       reuse=state)
    stages.append(("compile", prepared.compile_s))
    _timed_run(prepared, stages)
    t0 = time.perf_counter()
    checks = prepared.verify()
    stages.append(("verify", time.perf_counter() - t0))
    if any(not c.passed for c in checks):
        return Measurement(Status.WRONG_RESULT, message=_wrong(checks, recording.name),
                           checks=checks, stages=tuple(stages),
                           extra=(("reason", "verify:recorded"),))
    if verify_only:
        return Measurement(Status.OK, checks=checks, stages=tuple(stages))
    t0 = time.perf_counter()
    samples = prepared.measure(warmup=protocol.warmup, repeat=protocol.repeat,
                               flush=protocol.flush)
    stages.append(("measure", time.perf_counter() - t0))
    # The buffers now hold the last timed run's results: a candidate whose results depend on
    # how often it ran, or that races, must not pass on the strength of its first run alone.
    after = prepared.verify()
    if any(not c.passed for c in after):
        return Measurement(Status.WRONG_RESULT, message=_wrong(
            after, f"{recording.name} (the last timed run; the first run verified)"),
            checks=after, samples=tuple(samples), stages=tuple(stages),
            extra=(("reason", "verify:after-timing"),))
    return Measurement(Status.OK, samples=tuple(samples), checks=checks, stages=tuple(stages))


def _evaluate_strict(recording: Recording, backend: Backend, variant: Variant,
                     tolerance: TolerancePolicy, protocol: Protocol, verify_only: bool,
                     stages: list[tuple[str, float]], integrity: Integrity) -> Measurement:
    """The integrity gates (:func:`.checks.run_checks`), then the protocol, then the roofline."""
    t0 = time.perf_counter()
    report = run_checks(recording, backend, variant, tolerance, integrity)
    stages += [("compile", report.prepared.compile_s),
               ("checks", time.perf_counter() - t0 - report.prepared.compile_s)]
    extra: tuple[tuple[str, Any], ...] = (("integrity", report.notes), ("reason", ""))
    if verify_only:
        return Measurement(Status.OK, checks=report.checks, stages=tuple(stages), extra=extra)
    t0 = time.perf_counter()
    report.prepared.restore()
    samples = report.prepared.measure(warmup=protocol.warmup, repeat=protocol.repeat,
                                      flush=protocol.flush)
    stages.append(("measure", time.perf_counter() - t0))
    after = report.prepared.verify()
    if any(not c.passed for c in after):
        raise IntegrityError(_wrong(after, f"{recording.name} (the last timed run)"),
                             reason="verify:after-timing", checks=after)
    if integrity.roofline and samples:
        prepared = report.prepared
        check = roofline_gate(  # a time below the bound is timed again beside the recorded kernel
            recording, backend, median(samples), None, integrity.slack,
            retime=lambda: prepared.measure(warmup=0, repeat=1, flush=protocol.flush)[0],
            flush=protocol.flush)
        report.notes["roofline"] = check.to_json()
    return Measurement(Status.OK, samples=tuple(samples), checks=report.checks,
                       stages=tuple(stages), extra=extra)


def replay(recording: Recording, *, backend: Backend | str | None = None,
           options: Mapping[str, Any] | None = None, defines: Mapping[str, Any] | None = None,
           launch: LaunchConfig | None = None, source: KernelSource | None = None,
           constants: Mapping[str, Any] | None = None,
           tolerance: TolerancePolicy = None, warmup: int = 3, repeat: int = 10,
           flush: bool | None = None, verify_only: bool = False,
           integrity: IntegrityLevel = None, isolate: Isolation | None = None) -> Measurement:
    """Replay ``recording`` with the recorded variant, or one with overrides, and measure it.

    The variant is the recorded one with ``options``/``defines``/``constants`` (scalar
    parameters compiled in as constants) merged in and ``launch``/``source`` replaced. It is
    compiled once; the prologue is restored, the kernel launched
    once, and *every* array argument verified (written ones against the epilogue, the others
    must still equal the prologue), each under its policy (``tolerance`` overrides the
    recording's, see :func:`resolve_policies`). Then that same compiled module is timed with
    the protocol (``warmup``, ``repeat``, ``flush``: None for the unit's cache state, see
    :mod:`.cache_protocol`), unless ``verify_only``: then an OK
    measurement has checks but no samples.

    Returns ``Status.OK`` with samples and checks, or a failure Status with a message:
    COMPILE_FAILED (with the compiler's message), INVALID_CONFIG (unknown option, bad define
    name, impossible launch, a signature that no longer matches the recording), LAUNCH_FAILED,
    RUNTIME_FAILED, WRONG_RESULT (naming each failing buffer and its measured error). Stages
    (seconds): compile, restore, run, verify and, when timed, measure. ``integrity="strict"``
    runs the integrity gates as well (see the module docstring). ``isolate``: evaluate in a
    supervised worker process (:mod:`.isolate`): a crash is RUNTIME_FAILED, a hang TIMEOUT.
    """
    try:
        variant = recording.variant.with_(options=options, defines=defines, launch=launch,
                                          source=source, constants=constants)
    except KernforgeError as exc:  # e.g. a bad define name: the candidate is invalid
        return _failure(exc, [])
    return evaluate_variant(recording, variant, backend=backend, tolerance=tolerance,
                            warmup=warmup, repeat=repeat, flush=flush, verify_only=verify_only,
                            integrity=integrity, isolate=isolate)


def evaluate_variant(recording: Recording, variant: Variant, *,
                     backend: Backend | str | None = None, tolerance: TolerancePolicy = None,
                     warmup: int = 3, repeat: int = 10, flush: bool | None = None,
                     verify_only: bool = False, integrity: IntegrityLevel = None,
                     state: Prepared | None = None,
                     isolate: Isolation | None = None) -> Measurement:
    """:func:`replay` for a complete :class:`Variant` (the tuner's evaluation).

    ``state``: a :class:`Prepared` of this recording on this backend whose device state
    (buffers, pristine copies, expected fingerprints) is reused instead of uploading the
    prologue again; the restores and every verification run as without it. The integrity
    gates (``integrity="strict"``) prepare their own states and ignore it. ``isolate``: run
    it in a supervised worker (then ``state`` must be None: the worker keeps its own).
    """
    flush = resolve_cache(recording, flush)  # None: the unit's protocol (cache_protocol.py)
    if isolate is not None:
        if state is not None:
            raise ConfigError("evaluate_variant(state=..., isolate=...): a worker process "
                              "cannot use this process's device state",
                              hint="pass one of them, not both")
        return isolate.evaluate(recording, variant, backend=backend_name(backend),
                                tolerance=tolerance, warmup=warmup, repeat=repeat,
                                flush=flush, verify_only=verify_only, integrity=integrity)
    protocol = Protocol(warmup=warmup, repeat=repeat, flush=flush)
    gates = integrity_of(integrity)
    be = get_backend(backend if backend is not None else recording.backend)
    resolve_policies(recording, tolerance)  # a misnamed buffer is the caller's error: raise
    if state is not None:
        check_reusable(state, recording, be)  # likewise
    stages: list[tuple[str, float]] = []
    try:
        if gates is not None:
            return _evaluate_strict(recording, be, variant, tolerance, protocol, verify_only,
                                    stages, gates)
        return _evaluate(recording, be, variant, tolerance, protocol, verify_only, stages,
                         state)
    except (RecordingError, BackendUnavailableError):
        raise  # not the candidate's failure
    except Exception as exc:  # noqa: BLE001 - every candidate failure becomes data
        return _failure(exc, stages)


def _variant(recording: Recording, spec: Variant | Mapping[str, Any]) -> Variant:
    """A Variant as given, or the recorded one with overrides
    (``{"options": {...}, "defines": {...}, "launch": LaunchConfig | dict, "source":
    KernelSource | str}``; a string source replaces the recorded code)."""
    if isinstance(spec, Variant):
        return spec
    spec = strict_keys(spec, _OVERRIDE_KEYS, "the variant overrides")
    launch = spec.get("launch")
    if isinstance(launch, Mapping):
        launch = LaunchConfig.from_json(launch)
    source = spec.get("source")
    if isinstance(source, str):
        source = recording.source.with_code(source)
    return recording.variant.with_(options=spec.get("options"), defines=spec.get("defines"),
                                   launch=launch, source=source,
                                   constants=spec.get("constants"))


def _checked(recording: Recording, backend: Backend, spec: Variant | Mapping[str, Any],
             tolerance: TolerancePolicy, label: str) -> Prepared:
    prepared = prepare(recording, backend=backend, variant=_variant(recording, spec),
                       tolerance=tolerance)
    prepared.restore()
    prepared.run_once()
    checks = prepared.verify()
    if any(not c.passed for c in checks):
        raise WrongResultError(
            _wrong(checks, f"variant {label} of {recording.name}"),
            hint=f"replay variant {label} to see every buffer's error; declare a tolerance "
                 f"if the difference is expected")
    return prepared


def compare(recording: Recording, a: Variant | Mapping[str, Any],
            b: Variant | Mapping[str, Any], *, backend: Backend | str | None = None,
            tolerance: TolerancePolicy = None, passes: int = 7, per_pass: int = 3,
            warmup: int = 3, flush: bool | None = None, seed: int = 0,
            max_passes: int | None = None, band: float = NOISE_BAND) -> ABResult:
    """Interleaved A/B timing of two variants of one recording; ``speedup`` is B over A;
    ``max_passes``: more passes, up to that many, while the verdict is inconclusive.

    Both are compiled, run and verified first; a side that fails raises its typed error
    (WrongResultError names the failing buffers). Then each is warmed up and the two are
    timed alternately (:func:`kernforge.harness.interleave`), restoring before every run.
    """
    flush = resolve_cache(recording, flush)
    Protocol(warmup=warmup, passes=passes, flush=flush)
    be = get_backend(backend if backend is not None else recording.backend)
    pa = _checked(recording, be, a, tolerance, "a")
    pb = _checked(recording, be, b, tolerance, "b")
    for p in (pa, pb):
        p.measure(warmup=warmup, repeat=0)

    def run_a() -> float:
        return pa.measure(warmup=0, repeat=1, flush=flush)[0]

    def run_b() -> float:
        return pb.measure(warmup=0, repeat=1, flush=flush)[0]

    result = interleave(run_a, run_b, passes=passes, per_pass=per_pass, seed=seed,
                        max_passes=max_passes, band=band)
    for label, p in (("a", pa), ("b", pb)):  # the last timed run of each must still verify
        checks = p.verify()
        if any(not c.passed for c in checks):
            raise WrongResultError(
                _wrong(checks, f"variant {label} of {recording.name} after timing"),
                hint="its results change from run to run (state-dependent or racy)")
    return result
