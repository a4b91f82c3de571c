"""Samplers: the ABC and the lazy ``sampler`` registry (one line per plugin).

Importing this package does not import Optuna; asking the registry for a sampler does.
"""

from __future__ import annotations

from ...core import Registry
from .base import ORIGINS, Sampler, Trial, TrialRecord

SAMPLERS: Registry[type[Sampler]] = Registry("sampler")
SAMPLERS.register("tpe", "kernforge.tune.samplers.tpe:TPE")
SAMPLERS.register("random", "kernforge.tune.samplers.random_search:RandomSearch")
SAMPLERS.register("exhaustive", "kernforge.tune.samplers.exhaustive:Exhaustive")
SAMPLERS.register("rounds", "kernforge.tune.samplers.rounds:Rounds")

__all__ = ["ORIGINS", "SAMPLERS", "Sampler", "Trial", "TrialRecord"]
