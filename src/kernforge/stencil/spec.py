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

import hashlib
import itertools
from collections.abc import Mapping
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
    """A stencil: its family, radius and steps; the matrix's own specs derive their weights
    (:func:`_weight`). ``coefficients`` (aligned with :attr:`offsets`) give other weights: any
    values, zeros included, as a recognized application kernel has them
    (:func:`custom`). ``dims=2``: a planar stencil (every ``dz`` is 0), applied to each z-plane
    with no boundary in z."""

    name: str
    kind: str  # "star" | "box" | "varcoeff"
    radius: int
    steps: int = 1  # > 1: a temporal (multi-step) variant, boundary fixed at every step
    coefficients: tuple[float, ...] | None = None
    dims: int = 3

    def __post_init__(self) -> None:
        if self.dims not in (2, 3):
            raise ConfigError(f"stencil {self.name}: dims={self.dims}", hint="2 or 3")
        if self.coefficients is not None and len(self.coefficients) != len(self.offsets):
            raise ConfigError(f"stencil {self.name}: {len(self.coefficients)} coefficients for "
                              f"{len(self.offsets)} offsets", hint="one per offset, in the "
                              "order of StencilSpec.offsets")

    @cached_property
    def offsets(self) -> tuple[tuple[int, int, int], ...]:
        """(dz, dy, dx) in a fixed order: center first, then lexicographic."""
        r = self.radius
        rng = range(-r, r + 1)
        zr = rng if self.dims == 3 else range(1)
        if self.kind == "box":
            offs = list(itertools.product(zr, rng, rng))
        else:  # star and varcoeff: the axes only
            offs = [(0, 0, 0)]
            for axis in range(3 - self.dims, 3):
                for d in rng:
                    if d:
                        o = [0, 0, 0]
                        o[axis] = d
                        offs.append((o[0], o[1], o[2]))
        offs.sort(key=lambda o: (o != (0, 0, 0), o))
        return tuple(offs)

    @cached_property
    def weights(self) -> np.ndarray:
        """Float64 weights aligned with :attr:`offsets` (the matrix's own: summing to 1)."""
        if self.coefficients is not None:
            return np.array(self.coefficients, dtype=np.float64)
        w = np.array([_weight(o, i + 1) for i, o in enumerate(self.offsets)], dtype=np.float64)
        return w / w.sum()

    @property
    def radii(self) -> tuple[int, int, int]:
        """The radius along (z, y, x): 0 along z for a planar stencil."""
        return (self.radius if self.dims == 3 else 0, self.radius, self.radius)

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
    def interior(self) -> tuple[int, int, int]:
        """The interior's extent (nz, ny, nx): a planar stencil's reaches every z-plane."""
        (rz, ry, rx), s = self.stencil.radii, self.shape
        return (s.nz - 2 * rz, s.ny - 2 * ry, s.nx - 2 * rx)

    @property
    def interior_points(self) -> int:
        z, y, x = self.interior
        return max(z, 0) * max(y, 0) * max(x, 0)

    @property
    def compulsory_bytes(self) -> int:
        """Bytes one sweep must move: every input field read once, the interior written once.

        For a temporal cell: one read of the grid and one write of the interior for all fused
        steps together (the point of temporal blocking).
        """
        item = self.precision.itemsize
        return (self.stencil.inputs * self.shape.points + self.interior_points) * item

    @property
    def updates(self) -> int:
        """Interior point updates per operator application (steps included)."""
        return self.interior_points * self.stencil.steps

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


def custom(kind: str, radius: int, weights: Mapping[tuple[int, int, int], float], *,
           dims: int = 3) -> StencilSpec:
    """A single-step ``kind`` stencil (``star`` or ``box``) of ``radius`` whose weight at each
    offset ``(dz, dy, dx)`` is ``weights[offset]`` (0 where absent), named after its family and
    a digest of its coefficients (``star_1_2d~1a2b3c4d``), so two specs with different
    coefficients never share a cell id (or a generated source)."""
    if kind not in ("star", "box") or radius < 1:
        raise ConfigError(f"custom stencil {kind} radius {radius}",
                          hint="a star or box stencil of radius >= 1")
    base = StencilSpec(kind, kind, radius, dims=dims)
    unknown = sorted(set(weights) - set(base.offsets))
    if unknown:
        raise ConfigError(f"offsets {unknown} are not in a {kind} stencil of radius {radius} "
                          f"({dims}D)", hint="a box stencil holds every offset within the radius")
    coeffs = tuple(float(weights.get(o, 0.0)) for o in base.offsets)
    digest = hashlib.sha256(repr(coeffs).encode()).hexdigest()[:8]
    name = f"{kind}_{radius}{'_2d' if dims == 2 else ''}~{digest}"
    return StencilSpec(name, kind, radius, coefficients=coeffs, dims=dims)


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
