"""Tuning inside the service: the tuner's parallel TPE with one evaluator per worker.

The search space is built on a worker (:func:`kernforge.replay.tuning.build_space`: the
backend's dimensions around the recorded variant, where that backend exists); every trial is a
request carrying the configuration, realized and evaluated on whichever worker is free
(:func:`kernforge.tune.tune` keeps one request in flight per evaluator). The winner is
validated on a worker (:func:`kernforge.replay.validate.validate`: every integrity gate,
then the interleaved re-measurement against the recorded variant); with ``run_dir`` the result
is written as ``kernforge tune`` writes it (``result.json``, ``history.png``, ``study.db``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import ConfigError, Measurement, Variant
from ..harness import ABResult
from ..record import load_recording
from ..replay.tuning import TuningOutcome, plot_history, write_result
from ..replay.validate import Validation, publish
from ..tune import Budget, SearchSpace, TrialRecord, TuneResult, tune
from .tasks import realize_task, space_task, validate_task

if TYPE_CHECKING:
    from .client import Client


@dataclass
class ServiceTuning:
    """A study run on the service, its best variant and the interleaved re-measure."""

    recording: str
    space: SearchSpace
    study: TuneResult
    best_variant: Variant | None
    ab: ABResult | None  # best vs recorded; None when the recorded configuration stayed best
    directory: Path | None = None
    validation: Validation | None = None  # every integrity gate, run on the winner

    @property
    def speedup(self) -> float:
        rejected = self.validation is not None and not self.validation.accepted
        return self.ab.speedup if self.ab and not rejected else 1.0


def _evaluator(client: Client, path: str, kw: Mapping[str, Any]
               ) -> Callable[[dict[str, Any]], Measurement]:
    def evaluate(config: dict[str, Any]) -> Measurement:
        return client.submit(path, config=config, **kw).result()
    return evaluate


def tune_remote(client: Client, recording: Any, *, preset: str = "standard",
                sampler: str = "tpe", budget: Budget | None = None, seed: int | None = 0,
                user_space: Mapping[str, Any] | None = None, tolerance: Any = None,
                warmup: int = 2, repeat: int = 7, flush: bool | None = None,
                evaluators: int | None = None, passes: int = 7,
                run_dir: Path | None = None, storage: Path | str | None = None,
                on_trial: Callable[[TrialRecord], None] | None = None) -> ServiceTuning:
    """Tune ``recording`` on the service: ``evaluators`` parallel trials (default: one per
    worker). ``run_dir`` writes ``<run_dir>/<unit>/`` like ``kernforge tune`` (and keeps the
    study there unless ``storage`` names another place)."""
    from .client import _path

    path = _path(recording)
    unit = Path(path).name
    directory = Path(run_dir) / unit if run_dir is not None else None
    if directory is not None:
        if (directory / "study.db").exists() and storage is None:
            raise ConfigError(f"{directory} already holds a study",
                              hint="choose another run directory, or pass storage= to resume")
        directory.mkdir(parents=True, exist_ok=True)
        storage = storage or directory
    space = client.call(space_task, path, preset, dict(user_space) if user_space else None,
                        tolerance, key="space")
    n = evaluators or max(1, len(client.worker_info()))
    kw = {"tolerance": tolerance, "warmup": warmup, "repeat": repeat, "flush": flush}
    study = tune(space, [_evaluator(client, path, kw) for _ in range(n)], sampler=sampler,
                 budget=budget, storage=storage, study_name=unit, seed=seed, on_trial=on_trial)
    best = study.best_trial
    best_variant = client.call(realize_task, path, best.config, key="realize") if best else None
    ab, validation = None, None
    base = study.baseline.config if study.baseline else None
    if best is not None and best_variant is not None and best.config != base:
        # the winner passes every integrity gate on a worker (as kernforge tune does
        # locally); its canonical re-measurement is the interleaved comparison reported
        baseline_s = study.baseline.median if study.baseline else None
        claimed = baseline_s / best.median if baseline_s and best.median else None
        validation = client.call(validate_task, path, best_variant, tolerance, passes,
                                 claimed, client.limits, key="validate")
        ab = validation.ab
        if directory is not None:
            publish(validation, directory / "ledger.jsonl", None)
    result = ServiceTuning(path, space, study, best_variant, ab, directory, validation)
    if directory is not None:
        _write(result, directory, sampler=sampler, preset=preset)
    return result


def _write(result: ServiceTuning, directory: Path, *, sampler: str, preset: str) -> None:
    """result.json and history.png, as ``kernforge tune`` writes them."""
    rec = load_recording(result.recording)
    study = result.study
    outcome = TuningOutcome(rec, directory, study, result.best_variant or rec.variant,
                            study.baseline.median if study.baseline else None,
                            study.best_trial.median if study.best_trial else None, result.ab,
                            result.validation)
    write_result(outcome, sampler=sampler, preset=preset)
    plot_history(outcome, directory / "history.png", sampler=sampler)
