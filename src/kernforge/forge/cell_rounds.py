"""One matrix cell as a tune search space, and the forge's rounds as its plan.

:class:`CellSpace` is the space of every operator the cell's designs build: a categorical
``design`` (the designs that apply to the cell, preferred first) and, per design, one dimension
``DESIGN.KNOB`` for each of its knobs with more than one value for the cell, conditional on
``design`` (a knob of another design does not change the point). The design module declares
it all: the knob's values (:func:`kernforge.stencil.matrix.space`, with the values its presets
and defaults use; a value that builds the same operator as an earlier one from the design's
defaults, such as a z-chunk longer than the grid, is left out), which knobs are the tile
(``geometry``: ordinal dimensions) and which options (categorical). A configuration the design
refuses (:func:`kernforge.stencil.matrix.build` gives None) violates the constraint
``builds``: the tuner never evaluates it. The baseline is the naive operator at its defaults,
the cell's reference.

:class:`ForgeRounds` is the forge loop's order as a :class:`kernforge.tune.samplers.rounds.
RoundPlan`: the design round (every applicable design at its presets, and each other design
with the incumbent's shared knobs, as :mod:`.loop` builds it), one round per change of
:data:`kernforge.stencil.designs.ROUND_ORDER` over the incumbent's knobs, the two pair rounds
(:mod:`.pairs`), then TPE with the design held at the incumbent's. The candidates are the
forge's own (:func:`.loop._candidates`), so this plan proposes what a forge run would, one
round at a time; unlike the forge it has no gate: the study's best trial is the incumbent.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from ..core import ConfigError
from ..stencil import designs
from ..stencil import matrix as mx
from ..stencil.operator import Operator
from ..stencil.spec import Cell
from ..tune import Dimension, Predicate, SearchSpace
from ..tune.samplers.rounds import RoundPlan
from ..tune.space import canonical
from .loop import Incumbent, _candidates

DESIGN = "design"
FIX_LIMIT = 64  # configurations tried to name an operator whose params the space lacks


def _values(design: str, cell: Cell, knob: str, values: Sequence[Any],
            used: Sequence[Any]) -> list[Any]:
    """``values`` and the ``used`` ones (presets, defaults), less a value that builds the same
    operator as an earlier one from the design's defaults (used ones are kept first)."""
    base = mx.defaults(design, cell)
    seen: dict[str, Any] = {}
    keep: list[Any] = []
    for v in dict.fromkeys([*used, *values]):
        op = mx.build(design, cell, {**base, knob: v})
        if op is None or op.key not in seen:
            keep.append(v)
            if op is not None:
                seen[op.key] = v
    order = list(dict.fromkeys([*values, *used]))
    return [v for v in order if v in keep]


class CellSpace:
    """The tune space of one cell's operators (module docstring)."""

    def __init__(self, cell: Cell, design_names: Sequence[str] | None = None) -> None:
        self.cell = cell
        self.designs = list(design_names or mx.applicable(cell))
        if not self.designs:
            raise ConfigError(f"no stencil design applies to {cell.id}",
                              hint="check the cell's stencil and shape")
        self.knobs: dict[str, dict[str, str]] = {}  # design -> knob -> dimension name
        self.fixed: dict[str, dict[str, Any]] = {}  # design -> knobs of one value
        dims = [Dimension.categorical(DESIGN, self.designs,
                                      "naive" if "naive" in self.designs else self.designs[-1])]
        conditions: dict[str, tuple[str, Sequence[Any]]] = {}
        for d in self.designs:
            space = mx.space(d, cell)
            used = [mx.defaults(d, cell), *mx.presets(d, cell)]
            self.knobs[d], self.fixed[d] = {}, {}
            for knob, values in space.items():
                vals = _values(d, cell, knob, values, [p[knob] for p in used if knob in p])
                if len(vals) == 1:
                    self.fixed[d][knob] = vals[0]
                    continue
                name = f"{d}.{knob}"
                self.knobs[d][knob] = name
                if knob in designs.get(d).geometry and all(isinstance(v, int) for v in vals):
                    dims.append(Dimension.ordinal(name, sorted(vals), default=values[0]))
                else:
                    dims.append(Dimension.categorical(name, vals, default=values[0]))
                conditions[name] = (DESIGN, (d,))
        self._ops: dict[str, Operator | None] = {}
        base_design = dims[0].default
        baseline = {DESIGN: base_design}
        probe = SearchSpace(dims, (), baseline, conditions)
        baseline = self.config(base_design, mx.defaults(base_design, cell), probe) or baseline
        self.space = SearchSpace(dims, [Predicate("builds", self._builds)], baseline, conditions)

    def params(self, config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The design and its parameters of a configuration."""
        d = config[DESIGN]
        return d, {**self.fixed[d], **{k: config[n] for k, n in self.knobs[d].items()}}

    def operator(self, config: dict[str, Any]) -> Operator | None:
        """The configuration's operator, None where its design refuses it (cached)."""
        design, params = self.params(config)
        key = canonical([design, params])
        if key not in self._ops:
            self._ops[key] = mx.build(design, self.cell, params)
        return self._ops[key]

    def _builds(self, config: Any) -> bool:
        return self.operator(dict(config)) is not None

    def config(self, design: str, params: dict[str, Any],
               space: SearchSpace | None = None) -> dict[str, Any] | None:
        """The configuration of ``design`` with ``params`` (a knob left out at its first
        value), None when a value is not one of its dimension's."""
        sp = space or self.space
        out = {**sp.baseline, DESIGN: design}
        for knob, name in self.knobs[design].items():
            value = params.get(knob, sp[name].default)
            if not sp[name].contains(value):
                return None
            out[name] = value
        return sp.validate(out)

    def config_of(self, op: Operator) -> dict[str, Any] | None:
        """The configuration that builds ``op`` (same key): from its parameters, or, where a
        generator reports a value the space lacks (a z-chunk cut to the grid), the first of
        the dimension's values that builds the same operator; None when none does."""
        names = self.knobs[op.design]
        config = {**self.space.baseline, DESIGN: op.design}
        loose = []
        for knob, name in names.items():
            value = op.params.get(knob, self.space[name].default)
            if self.space[name].contains(value):
                config[name] = value
            else:
                loose.append(name)
        choices = [self.space[n].values() for n in loose]
        for values in itertools.islice(itertools.product(*choices), FIX_LIMIT):
            trial = self.space.validate({**config, **dict(zip(loose, values))})
            built = self.operator(trial)
            if built is not None and built.key == op.key:
                return trial
        return None


class ForgeRounds(RoundPlan):
    """The forge's rounds over a :class:`CellSpace` (module docstring)."""

    def __init__(self, cell_space: CellSpace, changes: Sequence[str] | None = None) -> None:
        self.cs = cell_space
        self.changes = tuple(changes) if changes else (
            DESIGN, *[c for c in designs.ROUND_ORDER if c != DESIGN], "pairs", "pairs2")

    def rounds(self) -> Sequence[str]:
        return self.changes

    def candidates(self, name: str, incumbent: dict[str, Any]) -> list[dict[str, Any]]:
        cell = self.cs.cell
        design, params = self.cs.params(incumbent)
        ops = _candidates(cell, Incumbent(design, dict(params)), name)
        if name == DESIGN:  # every applicable design at its presets, first
            presets = [mx.build(d, cell, p) for d in self.cs.designs
                       for p in mx.presets(d, cell)]
            ops = [op for op in presets if op is not None] + ops
        out: dict[str, dict[str, Any]] = {}
        for op in ops:
            if op.design not in self.cs.knobs:
                continue
            config = self.cs.config_of(op)
            if config is not None:
                out.setdefault(self.cs.space.key(config), config)
        return list(out.values())

    def fixed(self, incumbent: dict[str, Any]) -> Sequence[str]:
        return (DESIGN,)
