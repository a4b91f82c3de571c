"""Uniform random search (Optuna's RandomSampler): the baseline every smarter sampler beats."""

from __future__ import annotations

import optuna

from .optuna_study import OptunaSampler


class RandomSearch(OptunaSampler):
    def make_optuna_sampler(self, seed: int | None) -> optuna.samplers.BaseSampler:
        return optuna.samplers.RandomSampler(seed=seed)
