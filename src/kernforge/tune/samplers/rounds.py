"""Rounds: the forge's search order as a sampler -- starting points, then one dimension at a
time from the incumbent, then two at a time, then TPE around the incumbent.

A *round* is a list of configurations made from the incumbent (the best finished trial the
study holds, the baseline while none has finished) when the round starts; the sampler asks
them one by one, then starts the next round from the incumbent of that time. What the rounds
are and what each proposes is a :class:`RoundPlan`; the default, :class:`SpacePlan`, reads
them from the space alone: one round per dimension (every other value of it), then a pair
round (two dimensions changed at once, :data:`PAIR_LIMIT` combinations in an order fixed by
the seed). A domain passes its own plan (``tune(..., sampler="rounds",
sampler_options={"plan": plan})``): the stencil forge's is :mod:`kernforge.forge.cell_rounds`.
After the last round the sampler asks TPE (the options of :class:`.tpe.TPE`) for ever, the
dimensions the plan names in :meth:`RoundPlan.fixed` held at the incumbent's values (and the
conditional dimensions these make inactive, at their defaults); when :data:`RELEASE_AFTER`
proposals in a row are points the study holds, that part of the space is exhausted and TPE
goes on over the whole space.

Every proposal is enqueued into the Optuna study just before it is asked, with its round in
the trial's user attributes (``kernforge.round``, ``kernforge.round_name``,
``kernforge.incumbent``), so the study alone says where a run stopped: reopened after a kill,
the sampler regenerates the last round from the incumbent stored with it and skips every
configuration the study already holds.
"""

from __future__ import annotations

import json
import math
import random
import warnings
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import TrialState

from ...core import Status
from ..space import SearchSpace, canonical
from .base import Trial
from .optuna_study import PREFIX, OptunaSampler
from .tpe import N_STARTUP_TRIALS

PAIR_LIMIT = 40
VALUES_LIMIT = 16  # values of an int dimension a one-dimension round tries, evenly spaced
RELEASE_AFTER = 20  # TPE proposals in a row already in the study: the held part is exhausted


class RoundPlan(ABC):
    """What the rounds are (:meth:`rounds`), what each proposes from an incumbent
    (:meth:`candidates`: complete configurations of the space) and which dimensions the TPE
    phase keeps at the incumbent's values (:meth:`fixed`)."""

    @abstractmethod
    def rounds(self) -> Sequence[str]:
        """The rounds' names, in order (one round per name)."""

    @abstractmethod
    def candidates(self, name: str, incumbent: dict[str, Any]) -> list[dict[str, Any]]:
        """The configurations round ``name`` tries from ``incumbent``, in order."""

    def fixed(self, incumbent: dict[str, Any]) -> Sequence[str]:
        return ()


def _spread(values: Sequence[Any], limit: int = VALUES_LIMIT) -> list[Any]:
    if len(values) <= limit:
        return list(values)
    step = (len(values) - 1) / (limit - 1)
    return [values[round(i * step)] for i in range(limit)]


class SpacePlan(RoundPlan):
    """The rounds of any space: one per dimension, in declaration order, then pairs."""

    def __init__(self, space: SearchSpace, seed: int | None = None) -> None:
        self.space, self.seed = space, seed

    def rounds(self) -> Sequence[str]:
        return (*self.space.names, "pairs")

    def _moves(self, name: str, incumbent: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(name, v) for v in _spread(self.space[name].values())
                if canonical(v) != canonical(incumbent[name])]

    def candidates(self, name: str, incumbent: dict[str, Any]) -> list[dict[str, Any]]:
        if name != "pairs":
            return [{**incumbent, name: v} for _, v in self._moves(name, incumbent)]
        moves = [m for n in self.space.names for m in self._moves(n, incumbent)]
        combos = [(a, b) for i, a in enumerate(moves) for b in moves[i + 1:] if a[0] != b[0]]
        random.Random(self.seed or 0).shuffle(combos)
        return [{**incumbent, a[0]: a[1], b[0]: b[1]} for a, b in combos[:PAIR_LIMIT]]


class Rounds(OptunaSampler):
    """The rounds of ``plan`` (default: :class:`SpacePlan`), then TPE (module docstring)."""

    def __init__(self, space: SearchSpace, *, storage: str | None = None,
                 study_name: str = "kernforge", seed: int | None = None,
                 plan: RoundPlan | None = None) -> None:
        super().__init__(space, storage=storage, study_name=study_name, seed=seed)
        self.plan = plan if plan is not None else SpacePlan(space, seed)
        self.names = tuple(self.plan.rounds())
        self._taken = {space.key(c) for c in self.known_configs()}
        self._queue: list[dict[str, Any]] = []
        self._from: dict[str, Any] = space.baseline
        self._tpe = False
        self._repeats = 0  # TPE proposals in a row that the study already held
        self.round = -1  # no round started: the baseline comes first
        self._resume()

    def make_optuna_sampler(self, seed: int | None) -> optuna.samplers.BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(
                multivariate=True, group=True, constant_liar=True,
                n_startup_trials=N_STARTUP_TRIALS, seed=seed)

    def incumbent(self) -> dict[str, Any]:
        """The best finished trial's configuration (OK, lowest median); the baseline if none."""
        best: tuple[float, int, dict[str, Any]] | None = None
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if t.user_attrs.get(PREFIX + "status") != Status.OK.value:
                continue
            if t.value is None or not math.isfinite(t.value):
                continue
            if best is None or (t.value, t.number) < best[:2]:
                best = (t.value, t.number, self.encoding.decode(t.params))
        return dict(best[2]) if best is not None else dict(self.space.baseline)

    def _resume(self) -> None:
        """Where the study stopped: the last round any trial belongs to, regenerated from
        the incumbent stored with it (its configurations already in the study are skipped)."""
        last: tuple[int, dict[str, Any]] | None = None
        for t in self.study.get_trials(deepcopy=False):
            r = t.user_attrs.get(PREFIX + "round")
            if isinstance(r, int) and (last is None or r >= last[0]):
                inc = t.user_attrs.get(PREFIX + "incumbent")
                last = (r, self.space.validate(inc) if inc is not None else self.incumbent())
        if last is not None:
            self._start(last[0], last[1])

    def _start(self, r: int, incumbent: dict[str, Any]) -> None:
        self.round, self._from = r, incumbent
        if r >= len(self.names):
            self._enter_tpe(incumbent)
            return
        self._queue = [self.space.validate(c)
                       for c in self.plan.candidates(self.names[r], dict(incumbent))]

    def _enter_tpe(self, incumbent: dict[str, Any]) -> None:
        if self._tpe:
            return
        self._tpe = True
        names = list(self.plan.fixed(incumbent))
        # a dimension conditional on a held one and inactive at the incumbent's value is held
        # too (at its default): its values would all be the same point
        held = {**incumbent, **{n: self.space[n].default for n, (parent, _) in
                                self.space.conditions.items()
                                if parent in names and not self.space.active(n, incumbent)}}
        names += [n for n, (parent, _) in self.space.conditions.items()
                  if parent in names and not self.space.active(n, incumbent)]
        if names:
            encoded = self.encoding.encode(held)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self.study.sampler = optuna.samplers.PartialFixedSampler(
                    {n: encoded[n] for n in names}, self.study.sampler)

    def _next(self) -> dict[str, Any] | None:
        """The next configuration of the rounds not in the study yet; None after the last."""
        while self.round < len(self.names):
            while self._queue:
                config = self._queue.pop(0)
                if self.space.key(config) not in self._taken:
                    return config
            self._start(self.round + 1, self.incumbent())
        return None

    def _attrs(self) -> dict[str, Any]:
        name = self.names[self.round] if self.round < len(self.names) else "tpe"
        return {PREFIX + "round": self.round, PREFIX + "round_name": name,
                PREFIX + "incumbent": json.loads(canonical(self._from))}

    def ask(self) -> Trial | None:
        queued = False
        if not self.waiting():
            config = self._next()
            if config is not None:
                self.study.enqueue_trial(self.encoding.encode(config), user_attrs=self._attrs())
                queued = True
        trial = super().ask()
        if trial is None:
            return None
        if not queued and self._tpe and PREFIX + "round" not in self._live[trial.number].user_attrs:
            for key, value in self._attrs().items():  # a TPE trial: its phase, for resume
                self._live[trial.number].set_user_attr(key, value)
        key = self.space.key(trial.config)
        self._repeats = self._repeats + 1 if key in self._taken else 0
        if self._repeats >= RELEASE_AFTER and isinstance(
                self.study.sampler, optuna.samplers.PartialFixedSampler):
            self.study.sampler = self.make_optuna_sampler(self.seed)  # the held part is done
        self._taken.add(key)
        return trial
