"""Constraints on a search space, as data.

A constraint looks at a complete configuration (dimension name -> value) and returns ``None``
when the configuration is allowed, or a sentence saying why it is not. Tuple values (a block
shape such as ``(128, 2, 1)``) count as the product of their elements, so "threads per block"
is ``ProductAtMost(("launch.block",), 1024)`` whether the block is one dimension holding a
tuple or three integer dimensions.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import ConfigError
from ..core.strict import strict_keys


def _amount(value: Any, dim: str) -> int | float:
    """A numeric value, or the product of a tuple's elements."""
    if isinstance(value, (tuple, list)):
        return math.prod(_amount(v, dim) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"constraint needs a number for {dim!r}, got {value!r}",
                          hint="constrain only int, ordinal or tuple-of-int dimensions")
    return value


def _product(config: Mapping[str, Any], dims: Sequence[str]) -> int | float:
    return math.prod(_amount(config[d], d) for d in dims)


def _describe(config: Mapping[str, Any], dims: Sequence[str]) -> str:
    return " * ".join(f"{d}={config[d]!r}" for d in dims)


class Constraint(ABC):
    """One rule a configuration must satisfy."""

    @abstractmethod
    def check(self, config: Mapping[str, Any]) -> str | None:
        """``None`` if ``config`` is allowed, else why not (a human-readable reason)."""

    @abstractmethod
    def dimensions(self) -> tuple[str, ...]:
        """The dimension names this constraint reads (checked against the space)."""

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The constraint as one entry of the space file's ``constraints:`` list."""


@dataclass(frozen=True)
class ProductAtMost(Constraint):
    """The product of the dimensions' values is at most ``limit`` (e.g. threads per block)."""

    dims: tuple[str, ...]
    limit: int | float

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", tuple(self.dims))
        if not self.dims:
            raise ConfigError("product_at_most needs at least one dimension")

    def check(self, config: Mapping[str, Any]) -> str | None:
        value = _product(config, self.dims)
        if value <= self.limit:
            return None
        return f"{_describe(config, self.dims)} = {value} exceeds the limit {self.limit}"

    def dimensions(self) -> tuple[str, ...]:
        return self.dims

    def to_json(self) -> dict[str, Any]:
        return {"product_at_most": list(self.dims), "limit": self.limit}


@dataclass(frozen=True)
class AtMost(Constraint):
    """The product of ``dims`` is at most the value of dimension ``bound``; a bound of 0 (or
    ``None``) means unlimited -- e.g. threads per block <= ``opt.launch_bounds``."""

    dims: tuple[str, ...]
    bound: str

    def __post_init__(self) -> None:
        dims = (self.dims,) if isinstance(self.dims, str) else tuple(self.dims)
        object.__setattr__(self, "dims", dims)
        if not self.dims:
            raise ConfigError("at_most needs at least one dimension")

    def check(self, config: Mapping[str, Any]) -> str | None:
        bound = config[self.bound]
        if bound is None or bound == 0:
            return None
        value = _product(config, self.dims)
        if value <= _amount(bound, self.bound):
            return None
        return f"{_describe(config, self.dims)} = {value} exceeds {self.bound}={bound!r}"

    def dimensions(self) -> tuple[str, ...]:
        return (*self.dims, self.bound)

    def to_json(self) -> dict[str, Any]:
        return {"at_most": list(self.dims), "bound": self.bound}


@dataclass(frozen=True)
class ChangedAtMost(Constraint):
    """At most ``limit`` of ``dims`` differ from their values in ``start`` (a baseline): e.g.
    one change at a time from the recorded configuration, which an exhaustive study then
    visits each of once."""

    dims: tuple[str, ...]
    limit: int
    start: Mapping[str, Any]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dims", tuple(self.dims))
        if not self.dims or any(d not in self.start for d in self.dims):
            raise ConfigError("changed_at_most needs dimensions, each with its value in 'from'",
                              hint="write e.g. {changed_at_most: [a, b], limit: 1, "
                                   "from: {a: 1, b: 2}}")
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 0:
            raise ConfigError(f"changed_at_most limit {self.limit!r} must be an integer >= 0")

    def check(self, config: Mapping[str, Any]) -> str | None:
        changed = [d for d in self.dims if _frozen(config[d]) != _frozen(self.start[d])]
        if len(changed) <= self.limit:
            return None
        return f"{', '.join(changed)} changed at once (at most {self.limit} may be)"

    def dimensions(self) -> tuple[str, ...]:
        return self.dims

    def to_json(self) -> dict[str, Any]:
        return {"changed_at_most": list(self.dims), "limit": self.limit,
                "from": {d: list(v) if isinstance(v, tuple) else v
                         for d, v in self.start.items() if d in self.dims}}


def _frozen(value: Any) -> Any:
    """Lists read from a file compare equal to the tuples of the space (block shapes)."""
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


@dataclass(frozen=True)
class Predicate(Constraint):
    """Escape hatch: ``fn(config)`` returns True when the configuration is allowed.

    Saved by ``name`` only; loading a space that uses it needs ``predicates={name: fn}``.
    """

    name: str
    fn: Callable[[Mapping[str, Any]], bool]

    def check(self, config: Mapping[str, Any]) -> str | None:
        return None if self.fn(config) else f"violates {self.name}"

    def dimensions(self) -> tuple[str, ...]:
        return ()

    def to_json(self) -> dict[str, Any]:
        return {"predicate": self.name}


_KINDS = {"product_at_most": ("limit",), "at_most": ("bound",), "predicate": (),
          "changed_at_most": ("limit", "from")}


def constraint_from_json(entry: Any, predicates: Mapping[str, Callable[..., bool]]) -> Constraint:
    """Parse one entry of a ``constraints:`` list (see :mod:`kernforge.tune.space`)."""
    if not isinstance(entry, Mapping):
        raise ConfigError(f"constraint {entry!r} must be a mapping",
                          hint="write e.g. {product_at_most: [launch.block], limit: 1024}")
    kinds = [k for k in entry if k in _KINDS]
    if len(kinds) != 1:
        raise ConfigError(f"constraint {dict(entry)!r} must have exactly one of "
                          f"{', '.join(_KINDS)}", hint="see the kernforge.tune.space docstring")
    kind = kinds[0]
    strict_keys(entry, (kind, *_KINDS[kind]), f"{kind} constraint",
                hint=f"{kind} takes: {', '.join((kind, *_KINDS[kind]))}")
    for key in _KINDS[kind]:
        if key not in entry:
            raise ConfigError(f"{kind} constraint needs {key!r}")
    if kind == "predicate":
        name = entry[kind]
        if name not in predicates:
            raise ConfigError(f"constraint uses predicate {name!r}, which was not given",
                              hint="pass predicates={name: function} when loading the space")
        return Predicate(name, predicates[name])
    dims = entry[kind]
    dims = (dims,) if isinstance(dims, str) else tuple(dims)
    if kind == "product_at_most":
        return ProductAtMost(dims, entry["limit"])
    if kind == "changed_at_most":
        start = entry["from"]
        if not isinstance(start, Mapping):
            raise ConfigError(f"changed_at_most 'from' {start!r} must map dimensions to values")
        return ChangedAtMost(dims, entry["limit"], {k: _frozen(v) for k, v in start.items()})
    return AtMost(dims, str(entry["bound"]))
