"""Every valid point once, in :meth:`SearchSpace.valid_points` order (baseline first).

Each point is enqueued into the Optuna study just before it is asked, so the study holds the
same records as with any other sampler and resumes where it stopped: points already in the
study (finished, failed or waiting) are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import optuna

from ..space import SearchSpace
from .base import Trial
from .optuna_study import OptunaSampler


class Exhaustive(OptunaSampler):
    visits_all = True

    def __init__(self, space: SearchSpace, *, storage: str | None = None,
                 study_name: str = "kernforge", seed: int | None = None) -> None:
        super().__init__(space, storage=storage, study_name=study_name, seed=seed)
        self._taken = {space.key(c) for c in self.known_configs()}
        self._points: Iterator[dict[str, Any]] = (
            p for p in space.valid_points() if space.key(p) not in self._taken)

    def make_optuna_sampler(self, seed: int | None) -> optuna.samplers.BaseSampler:
        return optuna.samplers.RandomSampler(seed=seed)  # never consulted: all enqueued

    def ask(self) -> Trial | None:
        if not self.waiting():
            point = next(self._points, None)
            if point is None:
                return None
            self.study.enqueue_trial(self.encoding.encode(point))
        trial = super().ask()
        if trial is not None:
            self._taken.add(self.space.key(trial.config))
        return trial
