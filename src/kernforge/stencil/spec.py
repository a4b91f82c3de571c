"""Stencil specs, shapes, precisions and cells of the operator matrix.

Conventions (docs/stencil.md):

- A grid of shape ``NXxNYxNZ`` is a C-ordered array of numpy shape ``(NZ, NY, NX)``: x is the
  contiguous dimension, z the slowest.
- Offsets are ``(dz, dy, dx)``; a stencil of radius ``r`` reads ``in[z+dz, y+dy, x+dx]``.
- Boundary (Dirichlet, fixed): only *interior* points (at distance >= r from every face) are
  computed. An operator writes the interior of ``out`` and nothing else; the boundary of ``out``
  is preset to the input's boundary by the caller and must come back unchanged. A multi-step
  (temporal) stencil keeps the boundary ring at its initial values at every step.
- Coefficients are fixed per offset (baked into specialized kernels), distinct per offset so
  no kernel can exploit a symmetry the spec does not promise, positive and summing to 1 so
  repeated application stays bounded (fp16 included).
- ``varcoeff_star_1`` reads a second field ``coef`` (same shape):
  ``out = w0*in + coef * sum_{6 neighbours n} w_n * in[p+n]``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import Enum
from functools import cached_property

import numpy as np

from ..core import ConfigError


class Precision(str, Enum):
    FP16 = "fp16"
    FP32 = "fp32"
    FP64 = "fp64"

    @property
    def dtype(self) -> np.dtype:
        return np.dtype({"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}[self.value])

    @property
    def itemsize(self) -> int:
        return int(self.dtype.itemsize)

    @property
    def ctype(self) -> str:
        """The CUDA storage type."""
        return {"fp16": "__half", "fp32": "float", "fp64": "double"}[self.value]

    @property
    def acc_ctype(self) -> str:
        """The CUDA accumulation type (fp16 accumulates in fp32)."""
        return {"fp16": "float", "fp32": "float", "fp64": "double"}[self.value]

    @property
    def tolerance(self) -> float:
        """The scale-invariant relative-error gate: max|out-ref| / max|ref| over the interior."""
        return {"fp16": 1e-2, "fp32": 1e-4, "fp64": 1e-4}[self.value]


@dataclass(frozen=True)
class Shape:
    nx: int
    ny: int
    nz: int

    @property
    def name(self) -> str:
        return f"{self.nx}x{self.ny}x{self.nz}"

    @property
    def array_shape(self) -> tuple[int, int, int]:
        return (self.nz, self.ny, self.nx)

    @property
    def points(self) -> int:
        return self.nx * self.ny * self.nz

    def interior(self, radius: int) -> tuple[int, int, int]:
        """The interior's extent (nz, ny, nx) for a stencil of ``radius``."""
        return (self.nz - 2 * radius, self.ny - 2 * radius, self.nx - 2 * radius)

    def interior_points(self, radius: int) -> int:
        z, y, x = self.interior(radius)
        return max(z, 0) * max(y, 0) * max(x, 0)

    @classmethod
    def parse(cls, text: str) -> Shape:
        parts = text.lower().split("x")
        try:
            nx, ny, nz = (int(p) for p in parts)
        except ValueError:
            raise ConfigError(f"bad grid shape {text!r}",
                              hint="write NXxNYxNZ with x contiguous, e.g. 512x512x512") from None
        if min(nx, ny, nz) < 1:
            raise ConfigError(f"bad grid shape {text!r}: every extent must be >= 1",
                              hint="e.g. 512x512x512")
        return cls(nx, ny, nz)


def _weight(offset: tuple[int, int, int], index: int) -> float:
    """Deterministic, distinct, positive: decays with distance, perturbed per offset."""
    dist = sum(abs(o) for o in offset)
    jitter = ((index * 2654435761) % 1000) / 1000.0  # Knuth hash: distinct, reproducible
    return (1.0 + 0.25 * jitter) / (1.0 + dist) ** 2


@dataclass(frozen=True)
class StencilSpec:
    name: str
    kind: str  # "star" | "box" | "varcoeff"
    radius: int
    steps: int = 1  # > 1: a temporal (multi-step) variant, boundary fixed at every step

    @cached_property
    def offsets(self) -> tuple[tuple[int, int, int], ...]:
        """(dz, dy, dx) in a fixed order: center first, then lexicographic."""
        r = self.radius
        rng = range(-r, r + 1)
        if self.kind == "box":
            offs = list(itertools.product(rng, rng, rng))
        else:  # star and varcoeff: the axes only
            offs = [(0, 0, 0)]
            for axis in range(3):
                for d in rng:
                    if d:
                        o = [0, 0, 0]
                        o[axis] = d
                        offs.append((o[0], o[1], o[2]))
        offs.sort(key=lambda o: (o != (0, 0, 0), o))
        return tuple(offs)

    @cached_property
    def weights(self) -> np.ndarray:
        """Float64 weights aligned with :attr:`offsets`, summing to 1."""
        w = np.array([_weight(o, i + 1) for i, o in enumerate(self.offsets)], dtype=np.float64)
        return w / w.sum()

    @property
    def points(self) -> int:
        return len(self.offsets)

    @property
    def inputs(self) -> int:
        """Fields read per sweep: the grid, plus ``coef`` for varcoeff."""
        return 2 if self.kind == "varcoeff" else 1

    @property
    def flops_per_point(self) -> int:
        """Minimal floating-point operations per interior point and step (FMA = 2)."""
        return 2 * self.points + (1 if self.kind == "varcoeff" else 0)

    @property
    def temporal(self) -> bool:
        return self.steps > 1


STENCILS: dict[str, StencilSpec] = {s.name: s for s in (
    StencilSpec("star_1", "star", 1),
    StencilSpec("star_2", "star", 2),
    StencilSpec("box_1", "box", 1),
    StencilSpec("box_2", "box", 2),
    StencilSpec("varcoeff_star_1", "varcoeff", 1),
    StencilSpec("star_1_t4", "star", 1, steps=4),
)}

SHAPES: tuple[Shape, ...] = (Shape(256, 256, 256), Shape(512, 512, 512), Shape(1024, 1024, 1024),
                             Shape(1024, 1024, 32), Shape(2048, 64, 64))
PRECISIONS: tuple[Precision, ...] = (Precision.FP16, Precision.FP32, Precision.FP64)


@dataclass(frozen=True)
class Cell:
    """One entry of the operator matrix: (stencil, shape, precision)."""

    stencil: StencilSpec
    shape: Shape
    precision: Precision

    @property
    def id(self) -> str:
        return f"{self.stencil.name}/{self.shape.name}/{self.precision.value}"

    @property
    def radius(self) -> int:
        return self.stencil.radius

    @property
    def compulsory_bytes(self) -> int:
        """Bytes one sweep must move: every input field read once, the interior written once.

        For a temporal cell: one read of the grid and one write of the interior for all fused
        steps together (the point of temporal blocking).
        """
        item = self.precision.itemsize
        return (self.stencil.inputs * self.shape.points
                + self.shape.interior_points(self.radius)) * item

    @property
    def updates(self) -> int:
        """Interior point updates per operator application (steps included)."""
        return self.shape.interior_points(self.radius) * self.stencil.steps

    @property
    def flops(self) -> int:
        return self.updates * self.stencil.flops_per_point

    @classmethod
    def parse(cls, text: str) -> Cell:
        try:
            stencil, shape, prec = text.split("/")
        except ValueError:
            raise ConfigError(f"bad cell id {text!r}",
                              hint="write STENCIL/NXxNYxNZ/PRECISION, e.g. star_1/512x512x512/fp32"
                              ) from None
        return cls(stencil_by_name(stencil), Shape.parse(shape), precision_by_name(prec))


def stencil_by_name(name: str) -> StencilSpec:
    try:
        return STENCILS[name]
    except KeyError:
        raise ConfigError(f"unknown stencil {name!r}",
                          hint=f"choose one of {', '.join(STENCILS)}") from None


def precision_by_name(name: str) -> Precision:
    try:
        return Precision(name)
    except ValueError:
        raise ConfigError(f"unknown precision {name!r}",
                          hint="choose one of fp16, fp32, fp64") from None


def matrix(stencils: list[str] | None = None, shapes: list[str] | None = None,
           precisions: list[str] | None = None) -> list[Cell]:
    """The operator matrix's cells, optionally filtered (names as on the command line)."""
    sts = [stencil_by_name(s) for s in stencils] if stencils else list(STENCILS.values())
    shs = [Shape.parse(s) for s in shapes] if shapes else list(SHAPES)
    prs = [precision_by_name(p) for p in precisions] if precisions else list(PRECISIONS)
    cells: list[Cell] = []
    for st in sts:
        for sh in shs:
            if min(sh.nx, sh.ny, sh.nz) <= 2 * st.radius:
                raise ConfigError(f"grid {sh.name} has no interior for {st.name}",
                                  hint=f"every extent must exceed {2 * st.radius}")
            cells.extend(Cell(st, sh, pr) for pr in prs)
    return cells
