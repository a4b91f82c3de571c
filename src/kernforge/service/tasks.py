"""The functions a worker runs for a request (submitted as Dask tasks by the client; an
evaluation task carries a batch of requests, evaluated one after the other, see
:mod:`.batch`).

An evaluation: the recording comes from the worker's state (loaded once), and so does its
prepared device state (:mod:`.devstate`: built once per unit and worker, checked out for the
request and given back after it); the variant is the request's, or a tuning point realized by
the backend (as ``replay.tuning.make_evaluator`` does). The variant is compiled first under the
compile watchdog (the backend caches the module in process), then
:func:`kernforge.replay.engine.evaluate_variant` restores, runs, verifies and times it on that
device state under the run watchdog -- its compile is then a cache hit; the Measurement's
compile stage is the one measured here. Candidate failures come back as Measurements; trouble
that is not the candidate's (an unreadable recording, a backend missing here) as
:class:`Raised`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from distributed import get_worker

from ..core import KernforgeError, Measurement, Status, Variant
from ..replay.devstate import Held
from ..replay.engine import evaluate_variant
from ..replay.prepare import Prepared, TolerancePolicy, is_tolerant, prepare, resolve_policies
from ..replay.tuning import build_space
from ..replay.validate import Validation, validate
from ..tune import SearchSpace
from .config import DEFAULT_STATE_CACHE_MB
from .guard import Guard
from .worker import Loaded, WorkerState, state


@dataclass(frozen=True)
class Limits:
    """The worker's settings, sent with every request: the watchdog's, and the bound of the
    worker's device-state cache (bytes; 0 keeps no state between requests)."""

    min_timeout_s: float = 1.0
    timeout_factor: float = 50.0
    compile_timeout_s: float = 300.0
    state_cache_bytes: int = DEFAULT_STATE_CACHE_MB << 20

    def run_timeout(self, baseline_s: float) -> float:
        return max(self.min_timeout_s, self.timeout_factor * baseline_s)


@dataclass(frozen=True)
class Request:
    """One evaluation: a recording (path as the workers see it) and a variant or a tuning
    point (``config``), the protocol, and optionally a fixed run-stage timeout."""

    recording: str
    variant: Variant | None = None
    config: Mapping[str, Any] | None = None
    tolerance: TolerancePolicy = None
    warmup: int = 3
    repeat: int = 10
    flush: bool | None = None  # None: the unit's cache state (replay/cache_protocol.py)
    verify_only: bool = False
    timeout_s: float | None = None
    limits: Limits = Limits()

    @property
    def protocol(self) -> tuple[Any, ...]:
        return (repr(self.tolerance), self.warmup, self.repeat, self.flush, self.verify_only)


@dataclass(frozen=True)
class Raised:
    """An error that is not the candidate's, to be raised again on the client."""

    kind: str
    message: str
    hint: str | None


def _raised(exc: KernforgeError) -> Raised:
    return Raised(type(exc).__name__, exc.message, exc.hint)


def _evaluate(loaded: Loaded, variant: Variant, req: Request,
              held: Held | None) -> Measurement:
    return evaluate_variant(loaded.recording, variant, backend=loaded.backend,
                            tolerance=req.tolerance, warmup=req.warmup, repeat=req.repeat,
                            flush=req.flush, verify_only=req.verify_only,
                            state=held.prepared if held is not None else None)


def _checkout(st: WorkerState, loaded: Loaded, req: Request, guard: Guard) -> Held | None:
    """This unit's device state (built under the compile watchdog when the worker has none),
    or None when it cannot be built (the evaluation then prepares its own and reports why)."""
    st.states.limit_bytes = req.limits.state_cache_bytes

    def build() -> Prepared:
        guard.stage("prepare", req.limits.compile_timeout_s)
        return prepare(loaded.recording, backend=loaded.backend)

    try:
        return st.states.checkout(loaded.key, build, 2 * loaded.recording.nbytes)
    except Exception:  # noqa: BLE001 - e.g. out of device memory: evaluate without reuse
        return None


def _checkin(st: WorkerState, held: Held | None, m: Measurement) -> Measurement:
    """Give the state back; an evaluation that changed its pristine copies fails."""
    return st.states.settle(held, m)


def _baseline_s(loaded: Loaded, req: Request, guard: Guard, held: Held | None) -> float:
    """Seconds the recorded variant takes with this protocol, compile excluded (measured
    once per worker and protocol; the run watchdog is a multiple of it)."""
    if req.protocol not in loaded.baselines:
        guard.stage("baseline", req.limits.compile_timeout_s)
        _evaluate(loaded, loaded.recording.variant, req, held)  # compiles; caches warm
        t0 = time.perf_counter()
        _evaluate(loaded, loaded.recording.variant, req, held)
        loaded.baselines[req.protocol] = time.perf_counter() - t0
    return loaded.baselines[req.protocol]


def _precompile(loaded: Loaded, variant: Variant, req: Request) -> float | None:
    """Compile into the backend's cache; the seconds it took, or None if it failed (the
    evaluation then reports the failure, under the compile watchdog)."""
    rec = loaded.recording
    t0 = time.perf_counter()
    try:
        loaded.backend.compile(variant, tolerant=is_tolerant(rec, resolve_policies(
            rec, req.tolerance)), recorded=rec.options)
    except KernforgeError:
        return None
    return time.perf_counter() - t0


def _with_compile(m: Measurement, compile_s: float | None, extra: dict[str, Any]
                  ) -> Measurement:
    stages = tuple((k, compile_s if k == "compile" and compile_s is not None else v)
                   for k, v in m.stages)
    return replace(m, stages=stages, extra=m.extra + tuple(extra.items()))


def _device_healthy(loaded: Loaded) -> bool:
    """False when the device context is unusable after a failure (a CUDA sticky error)."""
    cp = getattr(loaded.backend, "cp", None)
    if cp is None:
        return True
    try:
        cp.cuda.runtime.deviceSynchronize()
        return bool(cp.zeros(1).sum().item() == 0)
    except Exception:  # noqa: BLE001 - any error here means the context is gone
        return False


def _variant(loaded: Loaded, req: Request) -> Variant:
    if req.variant is not None:
        return req.variant
    base = loaded.recording.variant
    return loaded.backend.realize(base, dict(req.config), loaded.scalars) if req.config \
        else base


def evaluate_task(req: Request) -> Measurement | Raised:
    """Evaluate one request on this worker (a batch of one)."""
    return evaluate_batch_task([req])[0]


def evaluate_batch_task(reqs: Sequence[Request]) -> list[Measurement | Raised]:
    """Evaluate requests one after the other on this worker (the Dask task behind
    Client.submit and Client.submit_many), announced once; results in order.

    Each Measurement's ``extra`` says where its time went: ``evaluate_s`` (the replay engine:
    restore, run, verify, time, verify again), ``worker_s`` (the whole item on the worker:
    load, checkout, compile, evaluate, the pristine check, the watchdog's events) and
    ``announce_s`` (the batch's synchronous announcement, on its first item; 0 on the others).
    """
    worker = get_worker()
    st = state()
    with Guard(worker, str(worker.get_current_task()), "evaluate", len(reqs)) as guard:
        out: list[Measurement | Raised] = []
        for i, req in enumerate(reqs):
            t0 = time.perf_counter()
            got = _evaluate_one(worker, st, req, guard, last=i == len(reqs) - 1)
            if isinstance(got, Measurement):
                got = replace(got, extra=got.extra + (
                    ("worker_s", time.perf_counter() - t0),
                    ("announce_s", guard.announce_s if i == 0 else 0.0)))
            out.append(got)
        return out


def _evaluate_one(worker: Any, st: WorkerState, req: Request, guard: Guard, *,
                  last: bool) -> Measurement | Raised:
    try:
        loaded = st.load(req.recording)
    except KernforgeError as exc:
        guard.end(Measurement(Status.RUNTIME_FAILED), count=False, last=last)
        return _raised(exc)
    try:
        variant = _variant(loaded, req)
    except KernforgeError as exc:  # an unrealizable tuning point: the candidate's
        m = Measurement(exc.status or Status.INVALID_CONFIG, message=str(exc))
        guard.end(m, last=last)
        return m
    try:
        held = _checkout(st, loaded, req, guard)
        timeout = req.timeout_s or req.limits.run_timeout(
            _baseline_s(loaded, req, guard, held))
        guard.stage("compile", req.limits.compile_timeout_s)
        compile_s = _precompile(loaded, variant, req)
        guard.stage("run", timeout if compile_s is not None
                    else req.limits.compile_timeout_s)
        reused = held is not None and held.reused
        t0 = time.perf_counter()
        m = _evaluate(loaded, variant, req, held)
        evaluate_s = time.perf_counter() - t0
    except KernforgeError as exc:  # RecordingError, BackendUnavailableError
        guard.end(Measurement(Status.RUNTIME_FAILED), last=last)
        return _raised(exc)
    m = _with_compile(m, compile_s, {"worker": worker.address, "timeout_s": timeout,
                                     "device_state": "reused" if reused else "prepared",
                                     "evaluate_s": evaluate_s})
    st.evaluations += 1
    loaded.evaluations += 1
    if not m.ok and not _device_healthy(loaded):
        guard.deposit_and_exit(replace(m, message=m.message + "\n(the device context was "
                                       "unusable afterwards: the worker was restarted)"))
    m = _checkin(st, held, m)
    guard.end(m, last=last)
    return m


def space_task(path: str, preset: str, user: Mapping[str, Any] | None,
               tolerance: TolerancePolicy) -> SearchSpace | Raised:
    """The tuning space of a recording, built where its backend lives."""
    try:
        loaded = state().load(path)
        tolerant = is_tolerant(loaded.recording, resolve_policies(loaded.recording, tolerance))
        return build_space(loaded.recording, loaded.backend, preset=preset, user=user,
                           tolerant=tolerant)
    except KernforgeError as exc:
        return _raised(exc)


def realize_task(path: str, config: Mapping[str, Any]) -> Variant | Raised:
    try:
        loaded = state().load(path)
        return loaded.backend.realize(loaded.recording.variant, dict(config), loaded.scalars)
    except KernforgeError as exc:
        return _raised(exc)


def validate_task(path: str, variant: Variant, tolerance: TolerancePolicy, passes: int,
                  claimed: float | None, limits: Limits) -> Validation | Raised:
    """Every integrity gate on a tuned winner (:func:`kernforge.replay.validate.validate`),
    its canonical interleaved re-measurement included, watched as a whole. The ledger is
    written by the client."""
    worker = get_worker()
    try:
        loaded = state().load(path)
    except KernforgeError as exc:
        return _raised(exc)
    with Guard(worker, str(worker.get_current_task()), "validate") as guard:
        guard.stage("validate", limits.compile_timeout_s)
        try:
            result = validate(loaded.recording, variant, backend=loaded.backend,
                              tolerance=tolerance, passes=passes, claimed=claimed)
        except KernforgeError as exc:  # not the candidate's failure (RecordingError, ...)
            guard.end(Measurement(exc.status or Status.RUNTIME_FAILED), count=False)
            return _raised(exc)
        guard.end(Measurement(result.status), count=False)
        return result
