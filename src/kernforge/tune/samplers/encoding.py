"""Configurations <-> Optuna parameters.

Optuna's categorical choices must be None, bool, int, float or str: a categorical dimension
whose choices are such scalars (and distinct under ``==``) is passed as is; otherwise (block
shapes, ``1`` beside ``True``) each choice becomes its canonical JSON text, e.g.
``"[128,2,1]"``. Ordinal dimensions become the integer index of the choice, so TPE models
their order; int and bool dimensions map directly.
"""

from __future__ import annotations

from typing import Any

from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from ...core import ConfigError
from ..space import Dimension, SearchSpace, canonical, freeze

_SCALARS = (type(None), bool, int, float, str)


def _raw(d: Dimension) -> bool:
    if not all(isinstance(c, _SCALARS) for c in d.choices):
        return False
    return all(a != b for i, a in enumerate(d.choices) for b in d.choices[i + 1:])


class Encoding:
    """The Optuna view of one search space."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.distributions: dict[str, BaseDistribution] = {}
        self._tokens: dict[str, dict[str, Any] | None] = {}  # categorical: token -> value
        for d in space.dimensions:
            self.distributions[d.name] = self._distribution(d)

    def _distribution(self, d: Dimension) -> BaseDistribution:
        if d.kind == "int":
            low, high, step = d.choices
            return IntDistribution(low, high, log=d.log, step=step)
        if d.kind == "ordinal":
            return IntDistribution(0, len(d.choices) - 1)
        if d.kind == "bool":
            return CategoricalDistribution((False, True))
        if _raw(d):
            self._tokens[d.name] = None
            return CategoricalDistribution(d.choices)
        tokens = {canonical(c): c for c in d.choices}
        if len(tokens) != len(d.choices):  # pragma: no cover - Dimension refuses repeats
            raise ConfigError(f"dimension {d.name!r} has choices with the same text form")
        self._tokens[d.name] = tokens
        return CategoricalDistribution(tuple(tokens))

    def encode(self, config: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for d in self.space.dimensions:
            value = config[d.name]
            if d.kind == "ordinal":
                tokens = [canonical(c) for c in d.choices]
                out[d.name] = tokens.index(canonical(value))
            elif d.kind == "categorical" and self._tokens[d.name] is not None:
                out[d.name] = canonical(value)
            else:
                out[d.name] = value
        return out

    def decode(self, params: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for d in self.space.dimensions:
            value = params[d.name]
            if d.kind == "ordinal":
                value = d.choices[int(value)]
            elif d.kind == "categorical":
                tokens = self._tokens[d.name]
                value = tokens[value] if tokens is not None else value
            elif d.kind == "int":
                value = int(value)
            out[d.name] = freeze(value)
        return out
