"""The designs that generate operators for lifted programs, the candidates to try, and the
designs' knob spaces as the forge's search reads them (each design module declares its own:
``space``, ``refusal``, ``presets``, ``applicable``; nothing here names a knob)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...core import ConfigError
from . import codegen_plain, codegen_tiled
from .binding import Binding
from .codegen import Kernel, Refused
from .model import StencilProgram

DESIGNS = {m.DESIGN: m for m in (codegen_tiled, codegen_plain)}


def candidates(p: StencilProgram, b: Binding, limit: int | None = None
               ) -> tuple[list[Kernel], dict[str, str]]:
    """Operators for ``p`` bound by ``b`` at each design's presets (tiled first, plain last),
    and per design or preset that generated nothing, why. ``limit``: at most that many, the
    first plain preset always among them."""
    out: list[Kernel] = []
    refused: dict[str, str] = {}
    for name, mod in DESIGNS.items():
        for knobs in mod.presets(p) or [{}]:
            try:
                k = mod.generate(p, b, **knobs)
            except Refused as exc:
                refused.setdefault(name, exc.message)
                continue
            if all(o.key != k.key for o in out):
                out.append(k)
    if limit is not None and len(out) > limit:
        plain = [k for k in out if k.design == codegen_plain.DESIGN]
        head = [k for k in out if k.design != codegen_plain.DESIGN][:max(0, limit - 1)]
        out = head + plain[:limit - len(head)]
    return out, refused


def module(design: str) -> Any:
    """The module of ``design``; ConfigError naming the designs when there is none."""
    if design not in DESIGNS:
        raise ConfigError(f"no lifted-program design {design!r}",
                          hint=f"one of {', '.join(DESIGNS)}")
    return DESIGNS[design]


def knob_names() -> set[str]:
    """Every knob some design of lifted programs declares."""
    return {k for mod in DESIGNS.values() for k in mod.KNOBS}


def spaces(p: StencilProgram) -> dict[str, dict[str, tuple[int, ...]]]:
    """Per design that may generate ``p`` (tiled first), each knob's values."""
    return {name: mod.space(p) for name, mod in DESIGNS.items() if mod.applicable(p) is None}


def presets(p: StencilProgram) -> list[tuple[str, dict[str, int]]]:
    """Every applicable design's presets, in :func:`candidates`' order."""
    return [(name, dict(k)) for name, mod in DESIGNS.items() if mod.applicable(p) is None
            for k in mod.presets(p) or [{}]]


def refusal(design: str, p: StencilProgram, shape: tuple[int, int, int],
            knobs: Mapping[str, int]) -> Refused | None:
    """Why ``design`` with ``knobs`` generates nothing for ``p`` on ``shape``, decided
    without generating it (None: it generates)."""
    return module(design).refusal(p, shape, knobs)  # type: ignore[no-any-return]


def generate(design: str, p: StencilProgram, b: Binding, knobs: Mapping[str, int]) -> Kernel:
    """``design``'s operator for ``p`` bound by ``b`` with ``knobs``; :class:`Refused`."""
    return module(design).generate(p, b, **knobs)  # type: ignore[no-any-return]
