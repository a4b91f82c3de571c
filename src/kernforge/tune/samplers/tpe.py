"""TPE (Bayesian optimization) through Optuna, with every option that matters set explicitly:
Optuna's defaults differ between 4.x and 5.x."""

from __future__ import annotations

import warnings

import optuna

from .optuna_study import OptunaSampler

N_STARTUP_TRIALS = 10


class TPE(OptunaSampler):
    """Multivariate, grouped TPE; ``constant_liar`` lets parallel asks propose distinct points."""

    def make_optuna_sampler(self, seed: int | None) -> optuna.samplers.BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(
                multivariate=True, group=True, constant_liar=True,
                n_startup_trials=N_STARTUP_TRIALS, seed=seed)
