"""kernforge.tune: a generic tuner over an injected ``evaluate(config) -> Measurement``.

It knows nothing about backends or replays (it imports only :mod:`kernforge.core`). See
docs/tuning.md, "The tuner API".
"""

from .constraints import AtMost, ChangedAtMost, Constraint, Predicate, ProductAtMost
from .loop import Budget, Evaluator, TuneResult, tune
from .samplers import SAMPLERS, Sampler, Trial, TrialRecord
from .space import Dimension, SearchSpace

__all__ = [
    "SAMPLERS", "AtMost", "Budget", "ChangedAtMost", "Constraint", "Dimension", "Evaluator", "Predicate",
    "ProductAtMost", "Sampler", "SearchSpace", "Trial", "TrialRecord", "TuneResult", "tune",
]
