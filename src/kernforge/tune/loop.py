"""The tuning loop: one central budget, a cache of duplicates, constraint checks, banned
launch shapes and parallel evaluators around any registered sampler.

``evaluate(config) -> Measurement`` is injected; lower ``Measurement.median`` is better and
only ``Status.OK`` counts. An evaluator that raises a :class:`~kernforge.core.KernforgeError`
carrying a Status (CompileError, LaunchError, ...) produces a failed trial with that Status;
any other exception ends ``tune()`` like a crash (the study resumes from where it stopped).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import ConfigError, KernforgeError, Measurement, Status
from ..core.jsonio import write_json_atomic
from .samplers import SAMPLERS, Sampler, Trial, TrialRecord
from .space import SearchSpace, canonical

Evaluator = Callable[[dict[str, Any]], Measurement]
LAUNCH_PREFIX = "launch."


@dataclass(frozen=True)
class Budget:
    """When to stop: after ``trials`` evaluations (whole study, earlier sessions included),
    ``seconds`` of wall time (this session; evaluations in flight finish), or ``patience``
    evaluations without a better median. ``max_skips`` consecutive asks that evaluate nothing
    (duplicates, constraint violations, banned shapes) mean the space is exhausted."""

    trials: int | None = 100
    seconds: float | None = None
    patience: int | None = None
    max_skips: int = 100

    def __post_init__(self) -> None:
        for name in ("trials", "patience", "max_skips"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"budget {name}={v!r} must be a positive integer or None")
        if self.seconds is not None and not self.seconds > 0:
            raise ConfigError(f"budget seconds={self.seconds!r} must be > 0 or None")


@dataclass(frozen=True)
class TuneResult:
    """Every trial of the study (earlier sessions included), by number, and the best one."""

    trials: tuple[TrialRecord, ...]
    best_trial: TrialRecord | None
    baseline: TrialRecord | None  # the first trial of the baseline configuration
    stop_reason: str  # trials | seconds | patience | stalled | exhausted
    evaluations: int
    study_name: str
    storage: str | None

    @property
    def best_config(self) -> dict[str, Any] | None:
        return dict(self.best_trial.config) if self.best_trial else None

    @property
    def best(self) -> Measurement | None:
        return self.best_trial.measurement if self.best_trial else None


def _call(evaluate: Evaluator, config: dict[str, Any]) -> tuple[Measurement, float]:
    t0 = time.perf_counter()
    try:
        m = evaluate(dict(config))
    except KernforgeError as e:
        if e.status is None:
            raise
        m = Measurement(e.status, e.message)
    if not isinstance(m, Measurement):
        raise TypeError(f"evaluate() must return a kernforge Measurement, got {type(m)}")
    return m, time.perf_counter() - t0


class _Run:
    """The state of one tune() call; every sampler/storage call happens on this thread."""

    def __init__(self, space: SearchSpace, sampler: Sampler, evaluators: list[Evaluator],
                 budget: Budget, on_trial: Callable[[TrialRecord], None] | None) -> None:
        self.space, self.sampler, self.budget = space, sampler, budget
        self.evaluators, self.on_trial = evaluators, on_trial
        self.records: list[TrialRecord] = []
        self.cache: dict[str, Measurement] = {}
        self.banned: dict[str, int] = {}  # launch key -> trial that failed to launch
        self.best: TrialRecord | None = None
        self.evaluations = self.stale = self.skips = 0
        self.exhausted = False
        self.free = list(range(len(evaluators)))
        self.inflight: dict[Future[tuple[Measurement, float]], tuple[Trial, int, str]] = {}
        self.pending: dict[str, list[Trial]] = {}  # duplicates of a config in flight
        self.launch_dims = [n for n in space.names if n.startswith(LAUNCH_PREFIX)]
        self.pool: ThreadPoolExecutor | None = None
        self.start = time.monotonic()
        for record in sampler.history():
            self.evaluations += record.evaluated
            self._learn(record)

    def _launch_key(self, config: dict[str, Any]) -> str | None:
        if not self.launch_dims:
            return None
        return canonical({n: config[n] for n in self.launch_dims})

    def _learn(self, r: TrialRecord) -> None:
        self.records.append(r)
        self.cache.setdefault(self.space.key(r.config), r.measurement)
        if r.status is Status.LAUNCH_FAILED and r.origin == "evaluated":
            key = self._launch_key(r.config)
            if key is not None:
                self.banned.setdefault(key, r.number)
        if not r.evaluated:
            return
        if r.median is not None and (self.best is None or r.median < (self.best.median or 0)):
            self.best, self.stale = r, 0
        else:
            self.stale += 1

    def _finish(self, trial: Trial, m: Measurement, origin: str, seconds: float = 0.0) -> None:
        record = self.sampler.tell(trial, m, origin=origin, seconds=seconds)
        self._learn(record)
        if self.on_trial is not None:
            self.on_trial(record)

    def stop_reason(self) -> str | None:
        b = self.budget
        if b.trials is not None and self.evaluations >= b.trials:
            return "trials"
        if b.seconds is not None and time.monotonic() - self.start >= b.seconds:
            return "seconds"
        if b.patience is not None and self.stale >= b.patience:
            return "patience"
        if self.skips >= b.max_skips:
            return "stalled"
        return "exhausted" if self.exhausted else None

    def step(self) -> None:
        """Ask one trial: answer it without evaluating, or hand it to an idle evaluator."""
        trial = self.sampler.ask()
        if trial is None:
            self.exhausted = True
            return
        key = self.space.key(trial.config)
        self.skips += 1
        if key in self.cache:
            self._finish(trial, self.cache[key], "cached")
        elif key in {k for _, _, k in self.inflight.values()}:
            self.pending.setdefault(key, []).append(trial)
        elif (reason := self.space.check(trial.config)) is not None:
            self._finish(trial, Measurement(Status.INVALID_CONFIG, f"constraint: {reason}"),
                         "invalid")
        elif (launch := self._launch_key(trial.config)) in self.banned:
            self._finish(trial, Measurement(
                Status.LAUNCH_FAILED, f"launch shape {launch} is banned: it failed to launch "
                f"in trial {self.banned[launch or '']}"), "banned")
        else:
            self.skips = 0
            self._dispatch(trial, key)

    def _dispatch(self, trial: Trial, key: str) -> None:
        index = self.free.pop(0)
        self.evaluations += 1
        evaluate = self.evaluators[index]
        if self.pool is None:
            future: Future[tuple[Measurement, float]] = Future()
            future.set_result(_call(evaluate, trial.config))
        else:
            future = self.pool.submit(_call, evaluate, trial.config)
        self.inflight[future] = (trial, index, key)

    def _complete(self, future: Future[tuple[Measurement, float]]) -> None:
        trial, index, key = self.inflight.pop(future)
        self.free.append(index)
        m, seconds = future.result()
        self._finish(trial, m, "evaluated", seconds)
        for dup in self.pending.pop(key, []):
            self._finish(dup, m, "cached")

    def run(self) -> str:
        if len(self.evaluators) > 1:
            self.pool = ThreadPoolExecutor(len(self.evaluators), "kernforge-evaluate")
        try:
            while True:
                reason = self.stop_reason()
                while reason is None and self.free:
                    self.step()
                    reason = self.stop_reason()
                if not self.inflight:
                    return reason or "exhausted"
                done, _ = wait(list(self.inflight), return_when=FIRST_COMPLETED)
                for future in sorted(done, key=lambda f: self.inflight[f][0].number):
                    self._complete(future)
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)

    def result(self, reason: str, study_name: str, storage: str | None) -> TuneResult:
        records = tuple(sorted(self.records, key=lambda r: r.number))
        base = self.space.key(self.space.baseline)
        baseline = next((r for r in records if self.space.key(r.config) == base), None)
        return TuneResult(records, self.best, baseline, reason, self.evaluations,
                          study_name, storage)


def storage_url(storage: Path | str | None) -> tuple[str | None, Path | None]:
    """(Optuna storage URL, run directory): a ``*.db`` path is the SQLite file, another path a
    run directory holding ``study.db``; a string with ``://`` is an Optuna URL as is."""
    if storage is None:
        return None, None
    if isinstance(storage, str) and "://" in storage:
        return storage, None
    path = Path(storage)
    db = path if path.suffix == ".db" else path / "study.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{db.resolve()}", db.parent


def _save_space(run_dir: Path, study_name: str, space: SearchSpace) -> None:
    write_json_atomic(run_dir / f"{study_name}.space.json", space.to_json())


def tune(space: SearchSpace, evaluate: Evaluator | Sequence[Evaluator], *,
         sampler: str = "tpe", budget: Budget | None = None,
         storage: Path | str | None = None, study_name: str = "kernforge",
         seed: int | None = None,
         on_trial: Callable[[TrialRecord], None] | None = None,
         sampler_options: Mapping[str, Any] | None = None,
         isolated: bool = False) -> TuneResult:
    """Minimize ``evaluate(config).median`` over ``space``.

    ``evaluate`` is one evaluator or a sequence of them (one thread each, evaluating in
    parallel). ``storage`` (a run directory, a ``.db`` file or an Optuna URL; ``None`` = in
    memory) keeps the study; calling ``tune`` again with the same storage and ``study_name``
    resumes it without evaluating finished trials again. ``on_trial`` sees every finished
    trial, on the calling thread. ``sampler_options`` go to the sampler's constructor as
    keywords (e.g. the ``rounds`` sampler's ``plan``). ``isolated``: ``evaluate`` runs each
    candidate in a child process, so a trial a resumed study finds unfinished was stopped
    by the run's end, not by its candidate: it is evaluated again, not quarantined.
    """
    evaluators = [evaluate] if callable(evaluate) else list(evaluate)
    if not evaluators or not all(callable(e) for e in evaluators):
        raise ConfigError("tune() needs an evaluator: evaluate(config) -> Measurement",
                          hint="pass a function, or a non-empty list of functions")
    url, run_dir = storage_url(storage)
    kind = SAMPLERS.get(sampler)
    if isolated and url is not None:
        from .samplers.optuna_study import OptunaSampler, requeue_interrupted
        if issubclass(kind, OptunaSampler):
            requeue_interrupted(url, study_name)
    plugin = kind(space, storage=url, study_name=study_name, seed=seed,
                  **dict(sampler_options or {}))
    if run_dir is not None:
        _save_space(run_dir, study_name, space)
    run = _Run(space, plugin, evaluators, budget or Budget(), on_trial)
    reason = run.run()
    return run.result(reason, study_name, url)
