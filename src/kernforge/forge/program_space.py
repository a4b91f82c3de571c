"""The operators of one lifted program as a tune search space, and the forge's rounds over it.

:class:`ProgramSpace` is the space of every operator the designs of lifted programs
(:mod:`kernforge.stencil.program.designs`) generate for one program on one grid (the program
carries its precision): a categorical ``design`` over the designs that may generate it, and
per design one ordinal dimension ``DESIGN.KNOB`` for each of its knobs with more than one
value, conditional on ``design``. The design modules declare it all (their ``space``: the
knobs' values, the presets' among them); nothing here names a knob. The constraint
``generates`` is the design's own ``refusal``, decided without generating the operator (more
threads than a block holds, tiles past the shared memory, atomics the reductions cannot use):
the tuner never builds a refused combination, and its trial says why. The baseline is the
first preset of the last design (plain: every program takes it).

:class:`ProgramRounds` is the order the forge searches it in, as a
:class:`kernforge.tune.samplers.rounds.RoundPlan`: every design's presets first, then one round
per knob of the incumbent's design (its other values from the incumbent), a round of pairs
of them, then TPE with the design held at the incumbent's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import ConfigError
from ..stencil.program import StencilProgram
from ..stencil.program import designs as pd
from ..stencil.program.binding import Binding
from ..stencil.program.codegen import Kernel
from ..tune import Constraint, Dimension, SearchSpace
from ..tune.samplers.rounds import SpacePlan
from ..tune.space import canonical

DESIGN = "design"
PRESETS = "presets"  # the rounds' first: every design's presets


@dataclass(frozen=True)
class Generates(Constraint):
    """The design generates the configuration's operator (``why``: its refusal or None)."""

    why: Callable[[Mapping[str, Any]], str | None]

    def check(self, config: Mapping[str, Any]) -> str | None:
        return self.why(config)

    def dimensions(self) -> tuple[str, ...]:
        return ()

    def to_json(self) -> dict[str, Any]:
        return {"predicate": "generates"}


class ProgramSpace:
    """The tune space of one lifted program's operators on one grid (module docstring)."""

    def __init__(self, p: StencilProgram, b: Binding) -> None:
        self.p, self.b = p, b
        spaces = pd.spaces(p)
        if not spaces:
            raise ConfigError(f"no design generates operators for program {p.key}",
                              hint="see docs/stencil-programs.md (Operators for lifted "
                                   "programs)")
        self.designs = list(spaces)
        first = {d: next((k for n, k in pd.presets(p) if n == d), {}) for d in self.designs}
        self.knobs: dict[str, dict[str, str]] = {}  # design -> knob -> dimension name
        self.fixed: dict[str, dict[str, int]] = {}  # design -> knobs of one value
        dims = [Dimension.categorical(DESIGN, self.designs, self.designs[-1])]
        conditions: dict[str, tuple[str, Sequence[Any]]] = {}
        for d, knobs in spaces.items():
            self.knobs[d], self.fixed[d] = {}, {}
            for knob, values in knobs.items():
                if len(values) == 1:
                    self.fixed[d][knob] = values[0]
                    continue
                name = f"{d}.{knob}"
                self.knobs[d][knob] = name
                default = first[d].get(knob, values[0])
                dims.append(Dimension.ordinal(name, sorted(values), default=default))
                conditions[name] = (DESIGN, (d,))
        self._kernels: dict[str, Kernel] = {}
        self.space = SearchSpace(dims, [Generates(self.refusal)], {DESIGN: self.designs[-1]},
                                 conditions)

    def params(self, config: Mapping[str, Any]) -> tuple[str, dict[str, int]]:
        """The design and its knobs of a configuration."""
        d = str(config[DESIGN])
        return d, {**self.fixed[d], **{k: config[n] for k, n in self.knobs[d].items()}}

    def config(self, design: str, knobs: Mapping[str, int]) -> dict[str, Any] | None:
        """The configuration of ``design`` with ``knobs`` (one it lacks at its dimension's
        default; one the space has not ignored), None when a value is not its dimension's."""
        if design not in self.knobs:
            return None
        out = {**self.space.baseline, DESIGN: design}
        for knob, name in self.knobs[design].items():
            value = knobs.get(knob, self.space[name].default)
            if not self.space[name].contains(value):
                return None
            out[name] = value
        return self.space.validate(out)

    def refusal(self, config: Mapping[str, Any]) -> str | None:
        """Why the configuration's design generates nothing (None: it generates)."""
        design, knobs = self.params(config)
        why = pd.refusal(design, self.p, self.b.shape, knobs)
        return None if why is None else f"{design} refuses it: {why.message}"

    def kernel(self, config: Mapping[str, Any]) -> Kernel:
        """The configuration's operator (cached); :class:`~kernforge.stencil.program.
        codegen.Refused` where its design refuses it."""
        design, knobs = self.params(config)
        key = canonical([design, knobs])
        if key not in self._kernels:
            self._kernels[key] = pd.generate(design, self.p, self.b, knobs)
        return self._kernels[key]

    def preset_configs(self) -> list[dict[str, Any]]:
        """Every design's presets as configurations, in the designs' order."""
        out: dict[str, dict[str, Any]] = {}
        for design, knobs in pd.presets(self.p):
            c = self.config(design, knobs)
            if c is not None:
                out.setdefault(self.space.key(c), c)
        return list(out.values())

    @property
    def study_name(self) -> str:
        """One study per (program, grid, precision)."""
        nx, ny, nz = self.b.shape
        return f"program-{self.p.key}-{nx}x{ny}x{nz}-{self.p.precision}"


class ProgramRounds(SpacePlan):
    """The forge's rounds over a :class:`ProgramSpace` (module docstring)."""

    def __init__(self, ps: ProgramSpace, seed: int | None = None) -> None:
        super().__init__(ps.space, seed)
        self.ps = ps

    def rounds(self) -> Sequence[str]:
        return (PRESETS, *[n for n in self.space.names if n != DESIGN], "pairs")

    def _moves(self, name: str, incumbent: dict[str, Any]) -> list[tuple[str, Any]]:
        if name == DESIGN or not self.space.active(name, incumbent):
            return []
        return super()._moves(name, incumbent)

    def candidates(self, name: str, incumbent: dict[str, Any]) -> list[dict[str, Any]]:
        if name == PRESETS:
            return self.ps.preset_configs()
        return super().candidates(name, incumbent)

    def fixed(self, incumbent: dict[str, Any]) -> Sequence[str]:
        return (DESIGN,)
