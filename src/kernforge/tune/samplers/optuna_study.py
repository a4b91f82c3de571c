"""Samplers driven by an Optuna study through ask/tell (storage, resume, failures as data).

What is stored, per trial: the Optuna parameters (see :mod:`.encoding`) and these user
attributes -- ``kernforge.status`` (a :class:`~kernforge.core.Status` value),
``kernforge.message``, ``kernforge.samples`` (seconds), ``kernforge.median`` (``None`` unless
OK), ``kernforge.origin`` (evaluated / cached / invalid / banned), ``kernforge.seconds``,
``kernforge.config`` (the configuration as JSON). The objective value told to Optuna is the
median for OK trials and ``float("inf")`` for every failure, so TPE learns to avoid failing
regions; users read the Status, never the infinity. The study's search space is stored as the
study user attribute ``kernforge.space``; reopening the study with another space is refused.
"""

from __future__ import annotations

import json
import math
import sqlite3
from abc import abstractmethod
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ...core import ConfigError, Measurement, Status
from ...core.errors import SpaceChangedError, damaged_database
from ..space import SearchSpace, canonical
from .base import ORIGINS, Sampler, Trial, TrialRecord
from .encoding import Encoding

PREFIX = "kernforge."
QUARANTINED = ("quarantined on resume: its evaluation started and never finished, so it killed "
               "its worker or the run; it is not run again")


def _sqlite_error(exc: BaseException) -> sqlite3.DatabaseError | None:
    """The SQLite error under ``exc`` (SQLAlchemy keeps it as ``orig``), if there is one."""
    seen: BaseException | None = exc
    while seen is not None:
        for e in (seen, getattr(seen, "orig", None)):
            if isinstance(e, sqlite3.DatabaseError):
                return e
        seen = seen.__cause__ or seen.__context__
    return None


def _unusable_storage(storage: str | None, exc: sqlite3.DatabaseError) -> ConfigError:
    """A study database SQLite cannot read (overwritten, truncated): name it, and what to do;
    one it cannot use now (locked, disk full, an I/O error) is kept and said so."""
    where = storage.removeprefix("sqlite:///") if storage else "the study storage"
    if not damaged_database(exc):
        return ConfigError(f"{where}: cannot use the study database ({exc})",
                           hint="another process may hold it, or the disk is full or "
                                "failing; the file is kept as it is")
    return ConfigError(f"{where}: not a usable study database ({exc})",
                       hint="its trials cannot be read: move the file away to start this "
                            "study afresh, or tune into a new run directory (another --out)")


def requeue_interrupted(storage: str, study_name: str) -> int:
    """Trials left RUNNING in a stored study, each failed (no record) and its configuration
    enqueued again, so that the resumed study evaluates it instead of quarantining it: for
    studies whose evaluations run in a child process (a candidate cannot take the run down
    with it, so one left running was stopped by the run's end). Returns how many."""
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:  # no such study yet
        return 0
    except Exception as exc:
        bad = _sqlite_error(exc)
        if bad is None:
            raise
        raise _unusable_storage(storage, bad) from None
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for t in running:
        study.tell(t.number, state=TrialState.FAIL)
        if t.params:
            study.enqueue_trial(t.params, user_attrs={k: v for k, v in t.user_attrs.items()
                                                     if k == PREFIX + "baseline"})
    return len(running)


class OptunaSampler(Sampler):
    """A :class:`Sampler` over an Optuna study; subclasses choose the Optuna sampler."""

    def __init__(self, space: SearchSpace, *, storage: str | None = None,
                 study_name: str = "kernforge", seed: int | None = None) -> None:
        super().__init__(space, storage=storage, study_name=study_name, seed=seed)
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "value: inf" lines
        self.encoding = Encoding(space)
        try:
            self.study = optuna.create_study(
                storage=storage, study_name=study_name, direction="minimize",
                load_if_exists=True, sampler=optuna.samplers.RandomSampler(seed=0))
            fresh = not self.study.get_trials(deepcopy=False)
            self._check_space(fresh)
            self.recovered = self._recover()
        except Exception as exc:
            bad = _sqlite_error(exc)
            if bad is None:
                raise
            raise _unusable_storage(storage, bad) from None
        if fresh:
            self.study.enqueue_trial(self.encoding.encode(space.baseline),
                                     user_attrs={PREFIX + "baseline": True})
        # Continue the random stream sensibly on resume: offset the seed by the trials so far.
        n = len(self.study.get_trials(deepcopy=False))
        self.study.sampler = self.make_optuna_sampler(None if seed is None else seed + n)
        self._live: dict[int, optuna.Trial] = {}

    @abstractmethod
    def make_optuna_sampler(self, seed: int | None) -> optuna.samplers.BaseSampler:
        """The Optuna sampler that proposes points (``seed`` already offset on resume)."""

    def _check_space(self, fresh: bool) -> None:
        mine = self.space.to_json()
        stored = self.study.user_attrs.get(PREFIX + "space")
        if stored is None and fresh:
            self.study.set_user_attr(PREFIX + "space", mine)
        elif stored is None:
            raise ConfigError(f"study {self.study_name!r} exists but was not made by kernforge",
                              hint="choose another study name or storage")
        elif canonical(stored) != canonical(mine):
            raise SpaceChangedError(f"study {self.study_name!r} was created with another "
                                    "search space; resuming it with this one would mix "
                                    "incomparable trials",
                                    hint="use the same space to resume, or a new study name")

    def _recover(self) -> int:
        """Trials left RUNNING by a killed process: their evaluation started and never
        finished, so the candidate killed its worker or the run. Each is quarantined: told
        RUNTIME_FAILED (its configuration is then a cache hit, never evaluated again) -- but
        the baseline, the study's reference (a result without it has no speedup), which is
        asked again: its trial is failed (no record) and the baseline enqueued anew."""
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        base = self.space.key(self.space.baseline)
        for t in running:
            if set(t.params) != set(self.encoding.distributions):
                self.study.tell(t.number, state=TrialState.FAIL)  # never got a configuration
                continue
            if self.space.key(self.encoding.decode(t.params)) == base:
                self.study.tell(t.number, state=TrialState.FAIL)
                self.study.enqueue_trial(self.encoding.encode(self.space.baseline),
                                         user_attrs={PREFIX + "baseline": True})
                continue
            live = optuna.Trial(self.study, t._trial_id)
            attrs = {"status": Status.RUNTIME_FAILED.value, "message": QUARANTINED,
                     "samples": [], "median": None, "origin": "evaluated", "seconds": 0.0,
                     "config": json.loads(canonical(self.encoding.decode(t.params))),
                     "quarantined": True}
            for key, value in attrs.items():
                live.set_user_attr(PREFIX + key, value)
            self.study.tell(t.number, math.inf)
        return len(running)

    def known_configs(self) -> list[dict[str, Any]]:
        """Configurations of every trial in the study, waiting (enqueued) ones included."""
        out = []
        for t in self.study.get_trials(deepcopy=False):
            params = t.params or t.system_attrs.get("fixed_params") or {}
            if set(params) == set(self.encoding.distributions):
                out.append(self.encoding.decode(params))
        return out

    def waiting(self) -> int:
        return len(self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def history(self) -> list[TrialRecord]:
        done = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        return [self._record(t) for t in sorted(done, key=lambda t: t.number)
                if PREFIX + "status" in t.user_attrs]

    def _record(self, t: FrozenTrial) -> TrialRecord:
        a = t.user_attrs
        m = Measurement(Status(a[PREFIX + "status"]), a.get(PREFIX + "message", ""),
                        tuple(float(s) for s in a.get(PREFIX + "samples", ())))
        return TrialRecord(t.number, self.encoding.decode(t.params), m,
                           a.get(PREFIX + "origin", "evaluated"),
                           float(a.get(PREFIX + "seconds", 0.0)))

    def ask(self) -> Trial | None:
        t = self.study.ask(self.encoding.distributions)
        self._live[t.number] = t
        return Trial(t.number, self.encoding.decode(t.params))

    def tell(self, trial: Trial, measurement: Measurement, *, origin: str = "evaluated",
             seconds: float = 0.0) -> TrialRecord:
        if origin not in ORIGINS:
            raise ValueError(f"origin {origin!r} is not one of {ORIGINS}")
        t = self._live.pop(trial.number)
        record = TrialRecord(trial.number, dict(trial.config), measurement, origin, seconds)
        attrs = {"status": measurement.status.value, "message": measurement.message,
                 "samples": list(measurement.samples), "median": record.median,
                 "origin": origin, "seconds": seconds,
                 "config": json.loads(canonical(trial.config))}
        for key, value in attrs.items():
            t.set_user_attr(PREFIX + key, value)
        self.study.tell(t, record.median if record.median is not None else math.inf)
        return record
