"""What a specialized stencil operator is: CUDA source plus the launches that apply it once.

An operator applies its cell's stencil once (all ``steps`` of a temporal cell) to device arrays
named by role: ``in`` (the grid), ``coef`` (varcoeff only), ``out`` (the result; its boundary is
preset by the caller and must stay untouched) and ``tmp`` (a scratch grid of the same shape,
allocated only when a launch names it, its boundary preset like ``out``'s). Sizes and coefficients are baked into the source, so an
operator is valid for exactly one cell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ROLES = ("in", "coef", "out", "tmp")


@dataclass(frozen=True)
class Launch:
    """One kernel launch: entry name, grid, block, dynamic shared memory, argument roles, and
    the preferred shared-memory carveout (percent of the unified L1/shared capacity given to
    shared memory; -1: the driver's choice, 0: the largest L1 the kernel's shared memory
    allows). The carveout is a function attribute: operators that differ only in it must
    differ in their source too (a comment will do), or a module cache would share one
    function between them."""

    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[str, ...]  # roles, in the kernel's parameter order
    shared_bytes: int = 0
    carveout: int = -1

    def __post_init__(self) -> None:
        bad = [a for a in self.args if a not in ROLES]
        if bad:
            raise ValueError(f"unknown argument roles {bad}; use {ROLES}")
        if not -1 <= self.carveout <= 100:
            raise ValueError(f"carveout {self.carveout}: a percentage 0-100, or -1")


@dataclass(frozen=True)
class Operator:
    """A specialized operator for one cell (see the module docstring)."""

    cell_id: str
    design: str  # structure name, e.g. "naive", "zmarch", "plane_sweep"
    params: dict[str, Any]  # the design's parameters (block, vector width, ...)
    source: str  # CUDA C++ (NVRTC-compilable; cuda_fp16.h allowed)
    launches: tuple[Launch, ...]
    options: tuple[str, ...] = ("--std=c++17",)  # NVRTC / nvcc options
    notes: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Stable identity of the operator's structure and parameters within its cell."""
        items = ",".join(f"{k}={self.params[k]}" for k in sorted(self.params))
        return f"{self.design}[{items}]"

    @property
    def needs_tmp(self) -> bool:
        return any("tmp" in launch.args for launch in self.launches)

    def entries(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(launch.entry for launch in self.launches))
