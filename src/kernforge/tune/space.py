"""Search spaces as data: dimensions, constraints and a baseline configuration.

A *configuration* maps every dimension name to a value. Names are free-form; by convention a
prefix says what the value drives: ``opt.`` a compile option, ``def.`` a ``#define``,
``launch.`` the launch geometry (launch shapes that fail to launch are banned by their
``launch.`` values), ``const.`` a specialized constant.

The space file format (YAML, TOML or JSON; :meth:`SearchSpace.from_mapping` takes the parsed
mapping, :meth:`SearchSpace.to_json` writes the same form)::

    version: 1                       # optional
    dimensions:                      # declaration order is the exhaustive order
      def.TILE_J:  {ordinal: [4, 8, 16, 32, 64], default: 16}     # ordered choices
      opt.unroll:  {bool: true}                                   # value = the default
      opt.maxrregcount: {int: [32, 255, 1], log: false, default: 64}  # [low, high(, step)]
      launch.block: {categorical: [[128, 1, 1], [64, 2, 1], [32, 4, 1]]}
      opt.launch_bounds: {ordinal: [0, 128, 256]}
    constraints:
      - {product_at_most: [launch.block], limit: 1024}          # threads per block
      - {at_most: [launch.block], bound: opt.launch_bounds}     # 0 = unlimited
      - {changed_at_most: [launch.block, opt.unroll], limit: 1,    # one change at a time
         from: {launch.block: [128, 1, 1], opt.unroll: true}}
      - {predicate: my_rule}       # a function passed as predicates={"my_rule": fn}
    baseline: {def.TILE_J: 16}     # partial: other dimensions take their default
    conditions:                    # optional: a dimension that matters only for some values
      def.TILE_J: {when: opt.unroll, in: [true]}                  # of another

A *conditional* dimension is inactive when its parent dimension takes none of the listed
values: its value then does not change the point, so :meth:`SearchSpace.key` reads it as its
default (two configurations that differ only there are the same point: the tuner's cache
answers the second). One design's knobs in a space of several designs are conditional on the
design dimension.

A mapping without a ``dimensions`` key is read as the ``dimensions`` mapping alone. Kinds:
``categorical`` (unordered choices), ``ordinal`` (ordered choices: the sampler models their
order), ``int`` (an integer range, inclusive, with optional ``step`` and ``log``), ``bool``.
A ``default`` missing means the first choice (``int``: the low end). Lists inside choices
become tuples (block shapes). Unknown keys, unknown dimension names, and values outside a
dimension are :class:`~kernforge.core.ConfigError` naming the offender.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..core import ConfigError
from ..core.strict import strict_keys
from .constraints import Constraint, constraint_from_json

KINDS = ("categorical", "ordinal", "int", "bool")
FORMAT_VERSION = 1
ENUMERATE_LIMIT = 1_000_000


def freeze(value: Any) -> Any:
    """Lists become tuples, recursively (JSON and YAML give lists for block shapes)."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def canonical(value: Any) -> str:
    """A stable text form of a value or configuration: equal text <=> same point."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Dimension:
    """One tunable: ``categorical`` / ``ordinal`` choices, an ``int`` range given as
    ``choices=(low, high, step)`` (``log`` for a log-uniform prior), or a ``bool``.

    ``default=None`` means the first value, unless ``None`` is itself one of the choices.
    """

    name: str
    kind: str
    choices: tuple[Any, ...] = ()
    default: Any = None
    log: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"dimension name {self.name!r} must be a non-empty string")
        if self.kind not in KINDS:
            raise ConfigError(f"dimension {self.name!r} has unknown kind {self.kind!r}",
                              hint=f"use one of {', '.join(KINDS)}")
        choices = (False, True) if self.kind == "bool" else freeze(tuple(self.choices))
        object.__setattr__(self, "choices", choices)
        if self.kind == "int":
            self._check_int()
        elif not choices:
            raise ConfigError(f"dimension {self.name!r} has no choices")
        elif len(self._tokens) != len(choices):
            raise ConfigError(f"dimension {self.name!r} has repeated choices {list(choices)}")
        if self.log and self.kind != "int":
            raise ConfigError(f"dimension {self.name!r}: log applies to int dimensions only")
        default = freeze(self.default)
        if default is None and not self.contains(None):
            default = self.values()[0]
        if not self.contains(default):
            raise ConfigError(f"default {default!r} of dimension {self.name!r} is not one of "
                              f"its values", hint=self.describe_values())
        object.__setattr__(self, "default", default)

    def _check_int(self) -> None:
        c = self.choices
        if len(c) == 2:
            c = (*c, 1)
            object.__setattr__(self, "choices", c)
        if len(c) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in c):
            raise ConfigError(f"int dimension {self.name!r} needs (low, high[, step]) as "
                              f"integers, got {list(self.choices)}")
        low, high, step = c
        if low > high or step < 1:
            raise ConfigError(f"int dimension {self.name!r}: need low <= high and step >= 1, "
                              f"got {list(c)}")
        high = low + (high - low) // step * step  # the last value actually reached
        object.__setattr__(self, "choices", (low, high, step))
        if self.log and (step != 1 or low < 1):
            raise ConfigError(f"int dimension {self.name!r}: log needs step 1 and low >= 1")

    @classmethod
    def categorical(cls, name: str, choices: Sequence[Any], default: Any = None) -> Dimension:
        return cls(name, "categorical", tuple(choices), default)

    @classmethod
    def ordinal(cls, name: str, choices: Sequence[Any], default: Any = None) -> Dimension:
        return cls(name, "ordinal", tuple(choices), default)

    @classmethod
    def integer(cls, name: str, low: int, high: int, step: int = 1, *, log: bool = False,
                default: int | None = None) -> Dimension:
        return cls(name, "int", (low, high, step), default, log)

    @classmethod
    def boolean(cls, name: str, default: bool = False) -> Dimension:
        return cls(name, "bool", (False, True), default)

    def values(self) -> Sequence[Any]:
        """Every value, in order (a ``range`` for int dimensions)."""
        if self.kind == "int":
            low, high, step = self.choices
            return range(low, high + 1, step)
        return self.choices

    @property
    def size(self) -> int:
        return len(self.values())

    def contains(self, value: Any) -> bool:
        value = freeze(value)
        if self.kind == "int":
            return (isinstance(value, int) and not isinstance(value, bool)
                    and value in self.values())
        if self.kind == "bool":
            return isinstance(value, bool)
        try:
            return canonical(value) in self._tokens
        except TypeError:
            return False

    @cached_property
    def _tokens(self) -> frozenset[str]:
        try:
            return frozenset(canonical(c) for c in self.choices)
        except TypeError:
            raise ConfigError(f"dimension {self.name!r}: choices must be None, bool, int, "
                              f"float, str or tuples of them, got {list(self.choices)}"
                              ) from None

    def describe_values(self) -> str:
        if self.kind == "int":
            low, high, step = self.choices
            return f"{self.name} takes integers {low}..{high} step {step}"
        return f"{self.name} takes one of {list(self.choices)}"

    def to_json(self) -> dict[str, Any]:
        if self.kind == "bool":
            return {"bool": self.default}
        out: dict[str, Any] = {self.kind: json.loads(canonical(self.choices))}
        if self.log:
            out["log"] = True
        out["default"] = json.loads(canonical(self.default))
        return out


_DIM_KEYS = {"categorical": ("default",), "ordinal": ("default",),
             "int": ("default", "log"), "bool": ()}
_DOC_KEYS = ("version", "dimensions", "constraints", "baseline", "conditions")


def dimension_from_json(name: str, spec: Any) -> Dimension:
    """Parse one entry of the ``dimensions:`` mapping (see the module docstring)."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"dimension {name!r} must be a mapping such as "
                          f"{{ordinal: [4, 8, 16]}}, got {spec!r}",
                          hint="to declare constraints or a baseline, put the dimensions "
                               "under a 'dimensions:' key")
    kinds = [k for k in spec if k in KINDS]
    if len(kinds) != 1:
        raise ConfigError(f"dimension {name!r} needs exactly one of {', '.join(KINDS)}",
                          hint=f"got keys {list(spec)}")
    kind = kinds[0]
    strict_keys(spec, (kind, *_DIM_KEYS[kind]), f"dimension {name!r}",
                hint=f"a {kind} dimension takes: {', '.join((kind, *_DIM_KEYS[kind]))}"
                     + (" (the value of bool: is the default)" if kind == "bool" else ""))
    value = spec[kind]
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"bool dimension {name!r}: write its default, true or false")
        return Dimension.boolean(name, value)
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"dimension {name!r}: {kind} needs a list, got {value!r}")
    return Dimension(name, kind, tuple(value), spec.get("default"), bool(spec.get("log", False)))


class SearchSpace:
    """Dimensions, constraints between them, and the baseline (the recorded configuration:
    every dimension's default, overridden by ``baseline``)."""

    def __init__(self, dimensions: Sequence[Dimension], constraints: Sequence[Constraint] = (),
                 baseline: Mapping[str, Any] | None = None,
                 conditions: Mapping[str, tuple[str, Sequence[Any]]] | None = None) -> None:
        self.dimensions = tuple(dimensions)
        self.constraints = tuple(constraints)
        self._by_name = {d.name: d for d in self.dimensions}
        if not self.dimensions:
            raise ConfigError("a search space needs at least one dimension")
        if len(self._by_name) != len(self.dimensions):
            raise ConfigError("dimension names repeat: "
                              f"{[d.name for d in self.dimensions]}")
        for c in self.constraints:
            for name in c.dimensions():
                self._dimension(name, f"constraint {c.to_json()}")
        self.conditions = self._conditions(conditions or {})
        self.baseline: dict[str, Any] = self.validate({**self.default(), **dict(baseline or {})})
        reason = self.check(self.baseline)
        if reason:
            raise ConfigError(f"the baseline configuration is invalid: {reason}",
                              hint="fix the baseline or the constraints")

    def _conditions(self, given: Mapping[str, tuple[str, Sequence[Any]]]
                    ) -> dict[str, tuple[str, tuple[Any, ...]]]:
        out: dict[str, tuple[str, tuple[Any, ...]]] = {}
        for name, (parent, values) in given.items():
            where = f"the condition on {name!r}"
            self._dimension(name, where)
            dim = self._dimension(parent, where)
            if parent == name or parent in given:
                raise ConfigError(f"{where}: its parent {parent!r} is itself or conditional",
                                  hint="condition a dimension on an unconditional one")
            values = freeze(tuple(values))
            bad = [v for v in values if not dim.contains(v)]
            if bad:
                raise ConfigError(f"{where}: {parent!r} never takes {bad}",
                                  hint=dim.describe_values())
            out[name] = (parent, values)
        return out

    def active(self, name: str, config: Mapping[str, Any]) -> bool:
        """Whether dimension ``name`` matters in ``config`` (see "conditional" above)."""
        cond = self.conditions.get(name)
        if cond is None:
            return True
        token = canonical(freeze(config[cond[0]]))
        return any(canonical(v) == token for v in cond[1])

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def __getitem__(self, name: str) -> Dimension:
        return self._dimension(name, "the search space")

    def _dimension(self, name: str, where: str) -> Dimension:
        if name not in self._by_name:
            raise ConfigError(f"unknown dimension {name!r} in {where}",
                              hint=f"dimensions are: {', '.join(self._by_name)}")
        return self._by_name[name]

    def size(self) -> int:
        """Number of points of the full grid (constraints not applied)."""
        return math.prod(d.size for d in self.dimensions)

    def default(self) -> dict[str, Any]:
        return {d.name: d.default for d in self.dimensions}

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The configuration in canonical form (declaration order, tuples); ConfigError for an
        unknown or missing name, or a value a dimension does not take."""
        for name in config:
            self._dimension(name, "the configuration")
        out: dict[str, Any] = {}
        for d in self.dimensions:
            if d.name not in config:
                raise ConfigError(f"configuration lacks dimension {d.name!r}",
                                  hint="give a value for every dimension")
            value = freeze(config[d.name])
            if not d.contains(value):
                raise ConfigError(f"value {value!r} is not allowed for {d.name!r}",
                                  hint=d.describe_values())
            out[d.name] = value
        return out

    def check(self, config: Mapping[str, Any]) -> str | None:
        """``None`` if the (complete) configuration satisfies every constraint, else why not."""
        for c in self.constraints:
            reason = c.check(config)
            if reason:
                return reason
        return None

    def key(self, config: Mapping[str, Any]) -> str:
        """Canonical text of a configuration: equal keys <=> the same point (an inactive
        conditional dimension reads as its default)."""
        return canonical({d.name: config[d.name] if self.active(d.name, config) else d.default
                          for d in self.dimensions})

    def points(self, limit: int = ENUMERATE_LIMIT) -> Iterator[dict[str, Any]]:
        """Every point of the grid in a deterministic order (the last dimension varies
        fastest), each once; ConfigError if the grid has more than ``limit`` points."""
        if self.size() > limit:
            raise ConfigError(f"the search space has {self.size()} points, too many to "
                              f"enumerate (limit {limit})",
                              hint="use the tpe or random sampler, or narrow the dimensions")
        names = self.names
        for values in itertools.product(*(d.values() for d in self.dimensions)):
            point = dict(zip(names, values))
            if all(point[n] == self[n].default or self.active(n, point) for n in self.conditions):
                yield point  # an inactive dimension only at its default: each point once

    def valid_points(self, limit: int = ENUMERATE_LIMIT) -> Iterator[dict[str, Any]]:
        """The points that satisfy every constraint, in :meth:`points` order."""
        return (p for p in self.points(limit) if self.check(p) is None)

    def to_json(self) -> dict[str, Any]:
        out = {"version": FORMAT_VERSION,
               "dimensions": {d.name: d.to_json() for d in self.dimensions},
               "constraints": [c.to_json() for c in self.constraints],
               "baseline": json.loads(canonical(self.baseline))}
        if self.conditions:  # absent when there are none: such spaces read as before
            out["conditions"] = {n: {"when": p, "in": json.loads(canonical(v))}
                                 for n, (p, v) in self.conditions.items()}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any],
                  predicates: Mapping[str, Callable[..., bool]] | None = None) -> SearchSpace:
        return cls.from_mapping(data, predicates)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any],
                     predicates: Mapping[str, Callable[..., bool]] | None = None
                     ) -> SearchSpace:
        """Build a space from a parsed space file (format in the module docstring)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"a search space must be a mapping, got {type(data).__name__}")
        if "dimensions" not in data:
            data = {"dimensions": data}
        strict_keys(data, _DOC_KEYS, "the search space")
        if data.get("version", FORMAT_VERSION) != FORMAT_VERSION:
            raise ConfigError(f"search space version {data['version']!r} is not supported",
                              hint=f"this kernforge reads version {FORMAT_VERSION}")
        dims = data["dimensions"]
        if not isinstance(dims, Mapping):
            raise ConfigError("'dimensions' must map names to dimension specs")
        constraints = data.get("constraints") or []
        if not isinstance(constraints, (list, tuple)):
            raise ConfigError("'constraints' must be a list")
        baseline = data.get("baseline") or {}
        if not isinstance(baseline, Mapping):
            raise ConfigError("'baseline' must map dimension names to values")
        conditions = {}
        for name, cond in (data.get("conditions") or {}).items():
            if not isinstance(cond, Mapping):
                raise ConfigError(f"condition on {name!r} must be a mapping",
                                  hint="write {when: DIMENSION, in: [VALUES]}")
            strict_keys(cond, ("when", "in"), f"the condition on {name!r}",
                        hint="a condition takes: when, in")
            conditions[str(name)] = (str(cond.get("when")), tuple(cond.get("in") or ()))
        return cls([dimension_from_json(str(n), s) for n, s in dims.items()],
                   [constraint_from_json(c, predicates or {}) for c in constraints], baseline,
                   conditions)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SearchSpace) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"SearchSpace({len(self.dimensions)} dimensions, {self.size()} points, "
                f"{len(self.constraints)} constraints)")
