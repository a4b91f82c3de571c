"""Recognizing a stencil in a recorded kernel by probing it (docs/applications-operators.md).

The kernel is a black box behind a :class:`Target`: its buffers (the parameters that point into
device memory, with the bytes from the pointer to the end of the allocation and whether the
recorded launch wrote them), its integer parameters, and ``run``: launch it with chosen
buffer contents and read every buffer back. On the GPU the target replays a native unit
(:mod:`.operator_gpu`); in the tests it is a numpy function. :func:`recognize` then:

1. takes the one written buffer as ``out`` and the one other buffer as ``in`` (more outputs, a
   second input, an in-place update: not a one-input stencil, refused with the reason);
2. for each candidate grid shape (integer parameters whose product fits the buffers, else a
   square or a cube of the element count), sets one input element at the grid's centre and
   reads which outputs changed: their linear distances decompose into ``(dz, dy, dx)`` within
   :data:`RMAX` only under the right shape, and the responses are the weights;
3. checks the kernel is that stencil: zero input gives zero in the interior (no constant
   term), and on a random input every interior point matches the stencil in float64 within
   :func:`tolerance` (a nonlinear kernel or one whose coefficients vary in space fails here;
   a second impulse tells which);
4. finds the boundary rule from the same run: the boundary of ``out`` kept, a copy of the
   input, zero, the stencil with zeros outside the grid, or the periodic stencil; nothing
   beyond the grid may change, and ``in`` must come back unchanged.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..stencil.spec import Cell, Precision, Shape, StencilSpec, custom

RMAX = 4  # the largest radius recognized per axis
UNCHANGED = ("the launch wrote none of the buffers its parameters point to (each came back as it "
             "went in: a time step over fields that are still all zero, as a wave's first one, "
             "looks like this; record a later launch: kernforge record --skip N)")
FLOATS = ("float64", "float32")
BOUNDARY_RULES = ("keep", "copy", "zero", "zeropad", "periodic")
Offset = tuple[int, int, int]


@dataclass(frozen=True)
class ProbeBuffer:
    """A pointer parameter: ``nbytes`` from the pointer to the end of its allocation
    (``region``: which allocation), ``written`` when the recorded launch changed it."""

    param: int
    nbytes: int
    written: bool
    region: int = 0


class Target(Protocol):
    buffers: tuple[ProbeBuffer, ...]
    ints: tuple[int, ...]  # the values of the integer-sized parameters that are not pointers
    dtype: str | None  # the element type, when the kernel's name tells it

    def run(self, contents: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Launch with ``contents`` (parameter index -> uint8 array of the buffer's ``nbytes``;
        buffers not given hold what the recording found) and return every buffer after it."""
        ...


@dataclass(frozen=True)
class NotAStencil:
    """Why the kernel is not replaced; ``definite`` when it was recognized (as something the
    designs do not build), so no other element type is tried."""

    reason: str
    definite: bool = False


@dataclass(frozen=True)
class Recognized:
    """A linear constant-coefficient stencil ``out = sum w * in[p + offset]`` on a grid of
    ``shape`` (nx, ny, nz; x contiguous), with a boundary rule (:data:`BOUNDARY_RULES`)."""

    in_param: int
    out_param: int
    dtype: str
    shape: tuple[int, int, int]
    kind: str  # star | box
    radius: int
    dims: int  # 3; 2: no offset along z (each z-plane on its own); 1: along x only
    weights: Mapping[Offset, float] = field(hash=False)
    boundary: str = "keep"

    @property
    def spec(self) -> StencilSpec:
        return custom(self.kind, self.radius, self.weights, dims=self.dims)

    @property
    def cell(self) -> Cell:
        prec = Precision.FP64 if self.dtype == "float64" else Precision.FP32
        return Cell(self.spec, Shape(*self.shape), prec)

    @property
    def points(self) -> int:
        return int(np.prod(self.shape))

    def describe(self) -> str:
        nx, ny, nz = self.shape
        grid = f"{nx}x{ny}" + (f"x{nz}" if nz > 1 else "")
        w = ", ".join(f"{o}: {v:.6g}" for o, v in sorted(self.weights.items()))
        return (f"{self.dims}D {self.kind} radius {self.radius} on {grid} {self.dtype}, "
                f"boundary {self.boundary}; weights {{{w}}}")


def model(rec: Recognized, x: np.ndarray, before: np.ndarray) -> np.ndarray:
    """What the recognized kernel writes, in float64, over the grid (shape (nz, ny, nx))."""
    nx, ny, nz = rec.shape
    g = x.reshape(nz, ny, nx).astype(np.float64)
    out = _apply(rec, g, "zeropad" if rec.boundary == "zeropad" else "periodic")
    inner = interior_mask(rec)
    if rec.boundary in ("keep", "copy", "zero"):
        rest = {"keep": before.reshape(nz, ny, nx).astype(np.float64), "copy": g,
                "zero": np.zeros_like(g)}[rec.boundary]
        out = np.where(inner, out, rest)
    return out


def _apply(rec: Recognized, g: np.ndarray, pad: str) -> np.ndarray:
    out = np.zeros_like(g)
    for (dz, dy, dx), w in rec.weights.items():
        if pad == "periodic":
            out += w * np.roll(g, (-dz, -dy, -dx), axis=(0, 1, 2))
        else:
            r = RMAX
            p = np.pad(g, r)
            nz, ny, nx = g.shape
            out += w * p[r + dz:r + dz + nz, r + dy:r + dy + ny, r + dx:r + dx + nx]
    return out


def radii(rec: Recognized) -> tuple[int, int, int]:
    """The radius along (z, y, x): 0 along the axes a 2D (or 1D) stencil does not reach."""
    return (rec.radius if rec.dims == 3 else 0, rec.radius if rec.dims > 1 else 0, rec.radius)


def interior_mask(rec: Recognized) -> np.ndarray:
    nx, ny, nz = rec.shape
    rz, ry, rx = radii(rec)
    m = np.zeros((nz, ny, nx), dtype=bool)
    m[rz:nz - rz, ry:ny - ry, rx:nx - rx] = True
    return m


def tolerance(dtype: str, weights: Mapping[Offset, float], scale: float) -> float:
    """The absolute error a reordered sum may make: ``4 n eps sum|w| max|in|`` for ``n``
    terms of ``dtype`` (eps: its unit roundoff)."""
    eps = float(np.finfo(np.dtype(dtype)).eps)
    return 4.0 * len(weights) * eps * sum(abs(w) for w in weights.values()) * max(scale, 1e-30)


def candidate_shapes(ints: Sequence[int], n_out: int, cap: int) -> list[tuple[int, int, int]]:
    """(nx, ny, nz) candidates: products of 3 then 2 integer parameters equal to the output's
    element count, the element count as a line, its cube and square roots, then products of
    parameters that fit in it."""
    vals = list(dict.fromkeys(v for v in ints if 2 <= v <= cap))
    exact: list[tuple[int, int, int]] = []
    fits: list[tuple[int, int, int]] = []
    for k in (3, 2):
        for combo in itertools.product(vals, repeat=k):
            shape = (combo[0], combo[1], combo[2] if k == 3 else 1)
            prod = math.prod(shape)
            (exact if prod == n_out else fits if prod <= cap else []).append(shape)
    roots = []
    for k in (3, 2):
        r = round(n_out ** (1 / k))
        for c in (r - 1, r, r + 1):
            if c > 1 and c ** k == n_out:
                roots.append((c, c, c) if k == 3 else (c, c, 1))
    # a 1D grid: told apart (and refused) before a root misreads it
    line = [(n_out, 1, 1)] if n_out > 2 * RMAX + 1 else []
    out = list(dict.fromkeys(exact + line + roots + sorted(fits, key=math.prod, reverse=True)))
    return out[:24]


def _decompose(o: int, nx: int, ny: int, nz: int) -> Offset | None:
    plane = nx * ny
    dz = round(o / plane) if nz > 1 else 0
    rest = o - dz * plane
    dy = round(rest / nx) if ny > 1 else 0
    dx = rest - dy * nx
    if max(abs(dz), abs(dy), abs(dx)) > RMAX:
        return None
    if (nz > 1 and nz <= 2 * abs(dz)) or ny <= 2 * abs(dy) or nx <= 2 * RMAX + 1:
        return None
    return (dz, dy, dx)


class _Prober:
    """Runs of one target with ``in`` and ``out`` set as ``dtype`` arrays."""

    def __init__(self, t: Target, inp: ProbeBuffer, out: ProbeBuffer, dtype: np.dtype) -> None:
        self.t, self.inp, self.out, self.dt = t, inp, out, dtype
        self.n_in, self.n_out = inp.nbytes // dtype.itemsize, out.nbytes // dtype.itemsize
        rng = np.random.default_rng(20261203)
        self.sentinel = rng.uniform(2.0, 3.0, self.n_out).astype(dtype)
        self.rng = rng
        self._cache: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def _bytes(self, a: np.ndarray, nbytes: int) -> np.ndarray:
        raw = np.zeros(nbytes, dtype=np.uint8)
        b = a.astype(self.dt).view(np.uint8)
        raw[:b.size] = b
        return raw

    def run(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(out after, in after) as float64 arrays of the element counts."""
        key = x.tobytes()
        if key not in self._cache:
            got = self.t.run({self.inp.param: self._bytes(x, self.inp.nbytes),
                              self.out.param: self._bytes(self.sentinel, self.out.nbytes)})
            n = self.dt.itemsize
            with np.errstate(all="ignore"):  # bytes of another type may read as NaN
                y = got[self.out.param][:self.n_out * n].view(self.dt).astype(np.float64)
                xin = got[self.inp.param][:self.n_in * n].view(self.dt).astype(np.float64)
            self._cache[key] = (y, xin)
        return self._cache[key]

    def impulse(self, at: int) -> np.ndarray:
        x = np.zeros(self.n_in, dtype=self.dt)
        x[at] = 1
        return x


def recognize(t: Target) -> Recognized | NotAStencil:
    """The stencil ``t`` computes, or why it is not one kernforge can replace."""
    written = [b for b in t.buffers if b.written]
    if not written:
        return NotAStencil(UNCHANGED)
    if len(written) > 1:
        return NotAStencil(f"the launch wrote {len(written)} buffers (parameters "
                           f"{', '.join(str(b.param) for b in written)}): a stencil operator "
                           "writes one grid (a reduction or a second output is not matched)")
    out = written[0]
    others = [b for b in t.buffers if b is not out]
    if not others:
        return NotAStencil("the kernel reads and writes one buffer (an in-place update); "
                           "an operator reads one grid and writes another")
    if len(others) > 1:
        return NotAStencil(f"the kernel reads {len(others)} buffers besides its output "
                           f"(parameters {', '.join(str(b.param) for b in others)}); only "
                           "one-input constant-coefficient stencils are matched")
    inp = others[0]
    if inp.region == out.region:
        return NotAStencil("input and output lie in one allocation")
    dtypes = [t.dtype] if t.dtype in FLOATS else list(FLOATS)
    if t.dtype is not None and t.dtype not in FLOATS:
        return NotAStencil(f"the kernel's elements are {t.dtype}; float32 and float64 grids "
                           "are matched")
    reasons = []
    for dt in dtypes:
        r = _recognize_as(t, inp, out, np.dtype(dt))
        if isinstance(r, Recognized) or r.definite:
            return r
        reasons.append(r.reason if len(dtypes) == 1 else f"as {dt}: {r.reason}")
    return NotAStencil("; ".join(reasons))


def _recognize_as(t: Target, inp: ProbeBuffer, out: ProbeBuffer,
                  dt: np.dtype) -> Recognized | NotAStencil:
    p = _Prober(t, inp, out, dt)
    cap = min(p.n_in, p.n_out)
    shapes = candidate_shapes(t.ints, p.n_out, cap)
    if not shapes:
        return NotAStencil(f"no grid shape: no integer parameters multiply to at most {cap} "
                           f"elements, and {p.n_out} is no square or cube")
    base, _ = p.run(np.zeros(p.n_in, dtype=dt))
    why = "no candidate grid shape explains the response to one input element"
    failed: NotAStencil | None = None  # the first shape that explained the impulse but failed
    for nx, ny, nz in shapes:
        centre = ((nz // 2) * ny + ny // 2) * nx + nx // 2
        y, _ = p.run(p.impulse(centre))
        resp = y - base
        hit = np.flatnonzero((resp != 0) | np.isnan(resp))
        if hit.size == 0:
            why = "no output changed when one input element at the grid's centre did"
            continue
        if hit.size > (2 * RMAX + 1) ** (3 if nz > 1 else 2):
            return NotAStencil(f"not local: {hit.size} outputs depend on one input element")
        offs = [_decompose(centre - int(q), nx, ny, nz) for q in hit]
        if any(o is None for o in offs):
            why = (f"the {hit.size} outputs that depend on one input element lie farther than "
                   f"{RMAX} points from it under every candidate grid shape")
            continue
        weights = {o: float(resp[q]) for o, q in zip(offs, hit, strict=True) if o is not None}
        if not all(math.isfinite(w) for w in weights.values()):
            return NotAStencil("one input element made an output NaN or infinite (nonlinear)")
        rz = max(abs(o[0]) for o in weights)
        r = max(max(abs(o[1]), abs(o[2]), abs(o[0])) for o in weights)
        dims = 3 if rz else 2 if ny > 1 else 1
        kind = "star" if all(sum(1 for d in o if d) <= 1 for o in weights) else "box"
        if nx <= 2 * r or (dims > 1 and ny <= 2 * r) or (dims == 3 and nz <= 2 * r):
            return NotAStencil(f"grid {nx}x{ny}x{nz} has no interior for radius {r}")
        rec = Recognized(inp.param, out.param, dt.name, (nx, ny, nz), kind, r, dims, weights)
        checked = _check(p, rec, base)
        if isinstance(checked, Recognized) and dims == 1:
            return NotAStencil(f"a 1D stencil ({checked.describe()}): the matrix's designs "
                               "build 2D and 3D grids", definite=True)
        if isinstance(checked, Recognized):
            return checked
        failed = failed or checked
    return failed or NotAStencil(why)


def _where(rec: Recognized, i: int) -> str:
    nx, ny, _ = rec.shape
    return f"(z={i // (nx * ny)}, y={i // nx % ny}, x={i % nx})"


def _check(p: _Prober, rec: Recognized, base: np.ndarray) -> Recognized | NotAStencil:
    n = rec.points
    inner = interior_mask(rec).reshape(-1)
    if np.any(base[:n][inner] != 0):
        i = int(np.flatnonzero(inner & (base[:n] != 0))[0])
        return NotAStencil(f"affine, not linear: with a zero input the output is "
                           f"{base[i]:.6g} at {_where(rec, i)} (a constant or source term)")
    x = p.rng.uniform(-1.0, 1.0, p.n_in).astype(p.dt)
    y, xin = p.run(x)
    if not np.array_equal(xin, x.astype(np.float64)):
        return NotAStencil("the kernel wrote into its input buffer")
    if not np.array_equal(y[n:], p.sentinel[n:].astype(np.float64)):
        return NotAStencil(f"the kernel wrote beyond the {n}-point grid of its output")
    g = x[:n].astype(np.float64)
    full = _apply(rec, g.reshape(rec.shape[::-1]), "periodic").reshape(-1)
    tol = tolerance(rec.dtype, rec.weights, float(np.abs(g).max()))
    err = np.abs(y[:n] - full)
    bad = inner & ~(err <= tol)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return NotAStencil(_diagnose(p, rec, base, i, float(err[i])))
    rule = _boundary(rec, g, y[:n], p.sentinel[:n].astype(np.float64), ~inner, tol)
    if isinstance(rule, NotAStencil):
        return rule
    return Recognized(rec.in_param, rec.out_param, rec.dtype, rec.shape, rec.kind, rec.radius,
                      rec.dims, rec.weights, rule)


def _diagnose(p: _Prober, rec: Recognized, base: np.ndarray, i: int, err: float) -> str:
    """Why an interior point missed: coefficients that vary in space, or a nonlinear kernel."""
    nx, ny, _ = rec.shape
    cz, cy, cx = (ra + rec.radius if ra else 0 for ra in radii(rec))  # off the centre
    at = (cz * ny + cy) * nx + cx
    y, _ = p.run(p.impulse(at))
    resp = y - base
    for (dz, dy, dx), w in rec.weights.items():
        q = at - (dz * ny + dy) * nx - dx
        if not math.isclose(resp[q], w, rel_tol=1e-6, abs_tol=1e-12):
            return (f"variable coefficients: the weight of offset {(dz, dy, dx)} is {w:.6g} at "
                    f"the grid's centre and {resp[q]:.6g} at {_where(rec, at)}")
    return (f"not linear in its input: on a random input the output differs from the "
            f"{rec.kind} stencil's by {err:.3g} at {_where(rec, i)}")


def _boundary(rec: Recognized, g: np.ndarray, y: np.ndarray, before: np.ndarray,
              edge: np.ndarray, tol: float) -> str | NotAStencil:
    if not edge.any():
        return "keep"
    grid = g.reshape(rec.shape[::-1])
    preds = {"keep": before, "copy": g, "zero": np.zeros_like(g),
             "zeropad": _apply(rec, grid, "zeropad").reshape(-1),
             "periodic": _apply(rec, grid, "periodic").reshape(-1)}
    for rule in BOUNDARY_RULES:
        exact = rule in ("keep", "copy", "zero")
        diff = np.abs(y[edge] - preds[rule][edge])
        if (np.all(y[edge] == preds[rule][edge]) if exact else bool(np.all(diff <= tol))):
            return rule
    i = int(np.flatnonzero(edge)[0])
    return NotAStencil(f"the boundary follows no rule an adapter reproduces (kept, copied, "
                       f"zero, zero-padded or periodic stencil): {y[i]:.6g} at "
                       f"{_where(rec, i)}")
