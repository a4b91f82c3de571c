"""The evolve evaluator: one source candidate, verified on every recording of its kernel, tuned
on the primary one (inner TPE, in-memory study, fixed seed), its best configuration re-verified
everywhere. The fitness is the best verified median time (seconds).

``make_evolve_evaluator(recordings)`` returns ``evaluate(code) -> EvalResult`` for
:func:`kernforge.evolve.controller.run`. A failing candidate is data (an ``EvalResult`` with
its ``Status`` and message), never an exception.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..backends import Backend, get_backend
from ..core import ConfigError, KernforgeError, Measurement, Recording, Status, Variant
from ..evolve.types import EvalResult, RecordingResult
from ..replay import evaluate_variant
from ..replay.isolate import Isolation
from ..replay.prepare import TolerancePolicy, is_tolerant, resolve_policies
from ..replay.tuning import build_space
from ..tune import Budget, tune

Evaluate = Callable[[str], EvalResult]


def _error(m: Measurement) -> float | None:
    errs = [c.max_abs for c in m.checks if getattr(c, "max_abs", None) is not None]
    return max(errs) if errs else None


def _compile_s(m: Measurement) -> float:
    return sum(s for k, s in m.stages if k == "compile")


@dataclass
class EvolveTarget:
    """All recordings of one kernel; ``recordings[0]`` is the primary (tuned) one."""

    recordings: tuple[Recording, ...]
    backend: Backend
    preset: str = "quick"
    tolerance: TolerancePolicy = None
    isolate: Isolation | None = None  # supervised workers run every candidate

    @classmethod
    def of(cls, recordings: Sequence[Recording], *, preset: str = "quick",
           tolerance: TolerancePolicy = None) -> EvolveTarget:
        if not recordings:
            raise ConfigError("no recordings to evolve", hint="record the application first")
        entries = {r.source.entry for r in recordings}
        if len(entries) != 1:
            raise ConfigError(f"recordings of several kernels given: {sorted(entries)}",
                              hint="evolve one kernel at a time (--kernels NAME)")
        return cls(tuple(recordings), get_backend(recordings[0].backend), preset, tolerance)

    @property
    def primary(self) -> Recording:
        return self.recordings[0]

    @property
    def original_code(self) -> str:
        return self.primary.source.code

    def base(self, recording: Recording, code: str) -> Variant:
        """The recorded variant of ``recording`` with ``code`` as its source."""
        return recording.variant.with_(source=recording.source.with_code(code))

    def realize(self, recording: Recording, code: str, config: dict[str, Any]) -> Variant:
        """``code`` with a tuned configuration applied (an empty one: the recorded variant)."""
        scalars = {a.name: a.value for a in recording.args if not a.is_array}
        base = self.base(recording, code)
        return self.backend.realize(base, config, scalars) if config else base


def _check_all(target: EvolveTarget, code: str, config: dict[str, Any], *, repeat: int,
               verify_only: bool) -> tuple[list[RecordingResult], Measurement | None, float]:
    """Verify (and time, unless ``verify_only``) on every recording; stop at the first failure.
    Returns the per-recording results, the first failing measurement and compile seconds."""
    results: list[RecordingResult] = []
    compile_s = 0.0
    for rec in target.recordings:
        try:
            variant = target.realize(rec, code, config)
        except KernforgeError as exc:
            m = Measurement(exc.status or Status.INVALID_CONFIG, message=str(exc))
        else:
            m = evaluate_variant(rec, variant, backend=target.backend,
                                 tolerance=target.tolerance, repeat=repeat, warmup=1,
                                 verify_only=verify_only, isolate=target.isolate)
        compile_s += _compile_s(m)
        med = m.median if m.ok and m.samples else None
        results.append(RecordingResult(rec.name, m.status, med, _error(m), m.message[:2000]))
        if not m.ok:
            return results, m, compile_s
    return results, None, compile_s


def _tune(target: EvolveTarget, code: str, trials: int, repeat: int, seed: int
          ) -> tuple[dict[str, Any], float | None, float]:
    """Inner TPE on the primary recording; (best config, its median, compile seconds)."""
    rec = target.primary
    tolerant = is_tolerant(rec, resolve_policies(rec, target.tolerance))
    try:
        space = build_space(rec, target.backend, preset=target.preset, tolerant=tolerant,
                            variant=target.base(rec, code))
    except ConfigError:
        return {}, None, 0.0
    compile_s = [0.0]

    def evaluate(config: dict[str, Any]) -> Measurement:
        try:
            variant = target.realize(rec, code, config)
        except KernforgeError as exc:
            return Measurement(exc.status or Status.INVALID_CONFIG, message=str(exc))
        m = evaluate_variant(rec, variant, backend=target.backend, tolerance=target.tolerance,
                             repeat=repeat, warmup=1, isolate=target.isolate)
        compile_s[0] += _compile_s(m)
        return m

    study = tune(space, evaluate, budget=Budget(trials=trials), seed=seed)
    best = study.best_trial
    if best is None:
        return {}, None, compile_s[0]
    return dict(best.config), best.median, compile_s[0]


def make_evolve_evaluator(recordings: Sequence[Recording] | EvolveTarget, *,
                          inner_trials: int = 30, preset: str = "quick",
                          tolerance: TolerancePolicy = None, repeat: int = 5,
                          seed: int = 0, isolate: Isolation | None = None) -> Evaluate:
    """``evaluate(code) -> EvalResult``: verify ``code`` on every recording (the first failure
    is the result), tune it on the primary recording (``inner_trials`` TPE trials, 0 = none),
    re-verify and time the best configuration on every recording. Fitness: the primary
    recording's verified median of the best configuration. ``isolate``: every run of candidate
    code in supervised workers (a crash or a hang is that candidate's failure)."""
    target = recordings if isinstance(recordings, EvolveTarget) else \
        EvolveTarget.of(recordings, preset=preset, tolerance=tolerance)
    if isolate is not None:
        target = replace(target, isolate=isolate)

    def evaluate(code: str) -> EvalResult:
        t0 = time.perf_counter()
        _, bad, c1 = _check_all(target, code, {}, repeat=repeat, verify_only=True)
        if bad is not None:
            return EvalResult(status=bad.status, message=bad.message[:4000],
                              extra={"compile_s": c1, "eval_s": time.perf_counter() - t0})
        config, _, c2 = _tune(target, code, inner_trials, repeat, seed) if inner_trials \
            else ({}, None, 0.0)
        results, bad, c3 = _check_all(target, code, config, repeat=repeat, verify_only=False)
        extra = {"compile_s": c1 + c2 + c3, "eval_s": time.perf_counter() - t0}
        if bad is not None:  # the tuned configuration fails somewhere: report that failure
            return EvalResult(status=bad.status, message=bad.message[:4000], config=config,
                              recordings=tuple(results), extra=extra)
        fitness = results[0].median_s
        errs = [r.error for r in results if r.error is not None]
        return EvalResult(status=Status.OK, fitness=fitness, error=max(errs) if errs else None,
                          config=config, recordings=tuple(results), extra=extra)

    return evaluate
