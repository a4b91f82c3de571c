"""The float64 reference oracle of the operator matrix, full (small grids) and sampled (big ones).

- :func:`reference`: the whole grid in float64 on the host, every step applied with the
  boundary ring (distance < r from a face) fixed at its input values.
- :func:`compared`: what an operator's output is checked on: pairs of the output's values and
  the oracle's at the same points, and the boundary that must be left as the input's. The
  harness's :class:`~kernforge.harness.checkers.OracleChecker` judges them (the forge plugs
  this function in: :mod:`kernforge.forge.oracle_check`): the error measured
  scale-invariantly as ``max|out - ref| / max|ref|`` over the checked points, gated per
  precision (``cell.precision.tolerance``), the boundary bit for bit. Grids of at most
  :data:`FULL_LIMIT` points are compared in full on the host; bigger ones are *sampled*, with
  the arrays left where they are (numpy or cupy):

  (a) complete slabs: the interior of the plane at the first interior, middle and last
      interior position along z, y and x; the input slab ``2*r*steps + 1`` thick around it is
      copied to the host and the oracle computed there;
  (b) ``points`` random interior points: their ``(2*r*steps + 1)^3`` neighbourhoods are
      gathered on the device with fancy indexing and the steps applied on the host in float64
      with the fixed-boundary mask;
  (c) the boundary of ``out`` unchanged: its faces, compared bit for bit with the input's on
      the device.

Inputs are fresh at every check: :func:`random_fields` draws ``in`` (and ``coef``) uniformly
in [0, 1) from a seed (drawn in float32, or float64 for fp64, then rounded to the storage type:
fp16 values may round up to 1.0); the seed is recorded in the check's result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core import ConfigError
from .spec import Cell, Precision, StencilSpec

FULL_LIMIT = 1 << 18  # grids up to 64^3 points are checked in full
DEFAULT_POINTS = 4096
BOUNDARY = "boundary_touched"  # the part (and detail key) of the boundary's changed points


# ---- array helpers (numpy or cupy) ---------------------------------------------------------
def array_module(a: Any) -> Any:
    """numpy, or cupy for a cupy array (imported only then)."""
    if type(a).__module__.split(".")[0] == "cupy":
        import cupy
        return cupy
    return np


def to_host(a: Any) -> np.ndarray:
    return a.get() if array_module(a) is not np else np.asarray(a)


def random_fields(cell: Cell, seed: int, xp: Any = np) -> dict[str, Any]:
    """``in`` (and ``coef`` for varcoeff) of ``cell``: uniform in [0, 1), storage dtype."""
    draw = np.float64 if cell.precision is Precision.FP64 else np.float32
    shape = cell.shape.array_shape
    names = ("in", "coef") if cell.stencil.kind == "varcoeff" else ("in",)
    out: dict[str, Any] = {}
    if xp is np:
        rng = np.random.default_rng(seed)
        for name in names:
            out[name] = rng.random(shape, dtype=draw).astype(cell.precision.dtype, copy=False)
    else:  # cupy: drawn on the device
        state = xp.random.RandomState(seed)
        for name in names:
            out[name] = state.random_sample(shape, dtype=draw).astype(cell.precision.dtype,
                                                                        copy=False)
    return out


# ---- the stencil in float64 ----------------------------------------------------------------
def _apply(spec: StencilSpec, a: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    """One sweep of the last three axes' interior of ``a`` (leading axes: a batch)."""
    r = spec.radius
    nz, ny, nx = a.shape[-3:]

    def shifted(dz: int, dy: int, dx: int) -> np.ndarray:
        return a[..., r + dz:nz - r + dz, r + dy:ny - r + dy, r + dx:nx - r + dx]

    terms = list(zip(spec.offsets, spec.weights, strict=True))
    if spec.kind == "varcoeff":
        if c is None:
            raise ConfigError(f"{spec.name} needs the coef field", hint="pass coef=...")
        acc = np.zeros(a.shape[:-3] + (nz - 2 * r, ny - 2 * r, nx - 2 * r))
        for off, w in terms[1:]:
            acc += w * shifted(*off)
        return terms[0][1] * shifted(0, 0, 0) + c[..., r:nz - r, r:ny - r, r:nx - r] * acc
    out = terms[0][1] * shifted(*terms[0][0])
    for off, w in terms[1:]:
        out += w * shifted(*off)
    return out


def _sweep(spec: StencilSpec, block: np.ndarray, coef: np.ndarray | None,
           coords: tuple[np.ndarray, np.ndarray, np.ndarray],
           grid: tuple[int, int, int]) -> np.ndarray:
    """Apply every step to a block of the grid (float64), ``coords`` its global (z, y, x)
    indices (broadcastable to it). Only points in the grid's interior are updated (the fixed
    boundary); points within ``r`` of the block's edges cannot be and keep stale values, so
    after ``steps`` steps the values at distance >= ``r*steps`` from the block's edges that do
    not lie on the grid's faces are exact."""
    r = spec.radius
    cur = np.array(block, dtype=np.float64)
    c = None if coef is None else np.asarray(coef, dtype=np.float64)
    inside = np.ones((1, 1, 1), dtype=bool)
    for g, n in zip(coords, grid, strict=True):
        inside = inside & (g >= r) & (g < n - r)
    mask = np.broadcast_to(inside, cur.shape)[..., r:-r, r:-r, r:-r]
    for _ in range(spec.steps):
        new = _apply(spec, cur, c)
        inner = cur[..., r:-r, r:-r, r:-r]
        inner[...] = np.where(mask, new, inner)
    return cur


def _spec_of(cell_or_spec: Cell | StencilSpec) -> StencilSpec:
    return cell_or_spec.stencil if isinstance(cell_or_spec, Cell) else cell_or_spec


def _check_fields(cell_or_spec: Cell | StencilSpec, inp: Any, coef: Any) -> None:
    spec = _spec_of(cell_or_spec)
    shape = tuple(getattr(inp, "shape", ()))
    if len(shape) != 3:
        raise ConfigError(f"the input must be a 3-d grid (nz, ny, nx), got shape {shape}",
                          hint="x is the last (contiguous) axis")
    if isinstance(cell_or_spec, Cell) and shape != cell_or_spec.shape.array_shape:
        raise ConfigError(f"input shape {shape} is not {cell_or_spec.id}'s "
                          f"{cell_or_spec.shape.array_shape}", hint="shape (nz, ny, nx)")
    if min(shape) <= 2 * spec.radius:
        raise ConfigError(f"grid {shape} has no interior for {spec.name}",
                          hint=f"every extent must exceed {2 * spec.radius}")
    if (spec.kind == "varcoeff") != (coef is not None):
        need = "needs" if spec.kind == "varcoeff" else "takes no"
        raise ConfigError(f"{spec.name} {need} a coef field", hint="coef is varcoeff's only")
    if coef is not None and tuple(coef.shape) != shape:
        raise ConfigError(f"coef shape {tuple(coef.shape)} differs from the input's {shape}",
                          hint="coef has the grid's shape")


def reference(cell_or_spec: Cell | StencilSpec, inp: Any, coef: Any = None) -> np.ndarray:
    """The float64 result on the whole grid (boundary = input), every step applied."""
    _check_fields(cell_or_spec, inp, coef)
    spec = _spec_of(cell_or_spec)
    a = to_host(inp)
    grid = (a.shape[0], a.shape[1], a.shape[2])
    coords = (np.arange(grid[0])[:, None, None], np.arange(grid[1])[None, :, None],
              np.arange(grid[2])[None, None, :])
    return _sweep(spec, a, None if coef is None else to_host(coef), coords, grid)


# ---- what is compared ---------------------------------------------------------------------
Pair = tuple[str, Any, Any, bool]  # (part, the output's values, the oracle's, bit for bit)


def _out_kind(cell: Cell, out: Any) -> str:
    shape = tuple(out.shape)
    if shape == cell.shape.array_shape:
        return "full"
    if shape == cell.shape.interior(cell.radius):
        return "interior"
    raise ConfigError(f"output shape {shape} is neither {cell.id}'s grid "
                      f"{cell.shape.array_shape} nor its interior "
                      f"{cell.shape.interior(cell.radius)}", hint="shape (nz, ny, nx)")


def boundary(cell: Cell, inp: Any, out: Any) -> list[Pair]:
    """The faces of ``out`` (full grid) and of the input: they must be identical, bit for bit
    (views on the arrays' device)."""
    if out.dtype != inp.dtype:
        raise ConfigError(f"output dtype {out.dtype} differs from the input's {inp.dtype}",
                          hint=f"{cell.id} stores {cell.precision.dtype}")
    r = cell.radius
    nz, ny, nx = cell.shape.array_shape
    faces = (np.s_[:r], np.s_[nz - r:], np.s_[r:nz - r, :r], np.s_[r:nz - r, ny - r:],
             np.s_[r:nz - r, r:ny - r, :r], np.s_[r:nz - r, r:ny - r, nx - r:])
    return [(BOUNDARY, out[f], inp[f], True) for f in faces]


def compared(cell: Cell, fields: Mapping[str, Any], out: Any, *, points: int = DEFAULT_POINTS,
             full: bool | None = None, slabs: bool = True, seed: int | None = None
             ) -> tuple[list[Pair], dict[str, Any]]:
    """``out`` (the full grid, or only its interior) against the oracle on ``fields`` (``in``,
    and ``coef`` for varcoeff): the pairs to compare and what they are. ``full`` None: the
    whole grid up to :data:`FULL_LIMIT` points, sampled above (``slabs`` and ``points``
    random points, drawn from ``seed``, the inputs' seed)."""
    if full is None:
        full = cell.shape.points <= FULL_LIMIT
    inp, coef = fields.get("in"), fields.get("coef")
    _check_fields(cell, inp, coef)
    kind = _out_kind(cell, out)
    pairs: list[Pair] = []
    if full:
        ref = reference(cell, inp, coef)
        r = cell.radius
        inner = np.s_[r:-r, r:-r, r:-r]
        host = to_host(out)
        pairs.append(("interior", host[inner] if kind == "full" else host, ref[inner], False))
        detail: dict[str, Any] = {"mode": "full", "output": kind}
    else:
        planes = slab_positions(cell) if slabs else {}
        for axis, positions in planes.items():
            for pos in positions:
                o, ref = _slab(cell, fields, out, kind, "zyx".index(axis), pos)
                pairs.append((f"{axis}={pos}", o, ref, False))
        pts = sample_points(cell, points, seed)
        if points:
            o, ref = _points(cell, fields, out, kind, pts)
            pairs.append(("points", o, ref, False))
        detail = {"mode": "sampled", "output": kind, "slabs": planes, "points": points}
    pairs += boundary(cell, inp, out) if kind == "full" else [(BOUNDARY, None, None, True)]
    return pairs, detail


def slab_positions(cell: Cell) -> dict[str, tuple[int, ...]]:
    """Per axis, the planes (a) checks: first interior, middle, last interior (distinct)."""
    r = cell.radius
    nz, ny, nx = cell.shape.array_shape
    return {axis: tuple(sorted({r, n // 2, n - 1 - r}))
            for axis, n in (("z", nz), ("y", ny), ("x", nx))}


def _slab(cell: Cell, fields: Mapping[str, Any], out: Any, kind: str, axis: int,
          pos: int) -> tuple[np.ndarray, np.ndarray]:
    """(out's interior plane at ``pos`` along ``axis``, the oracle's) on the host."""
    spec, r = cell.stencil, cell.radius
    reach = r * spec.steps
    grid = cell.shape.array_shape
    lo, hi = max(0, pos - reach), min(grid[axis], pos + reach + 1)
    cut: list[slice] = [slice(None)] * 3
    cut[axis] = slice(lo, hi)
    block = to_host(fields["in"][tuple(cut)])
    coef = fields.get("coef")
    cblock = None if coef is None else to_host(coef[tuple(cut)])
    coords = [np.arange(n) for n in grid]
    coords[axis] = np.arange(lo, hi)
    shaped = (coords[0][:, None, None], coords[1][None, :, None], coords[2][None, None, :])
    res = _sweep(spec, block, cblock, shaped, grid)
    plane = [slice(r, n - r) for n in grid]
    plane[axis] = slice(pos - lo, pos - lo + 1)
    ref = res[tuple(plane)]
    o_cut = [slice(r, n - r) for n in grid] if kind == "full" else [slice(None)] * 3
    o_cut[axis] = slice(pos, pos + 1) if kind == "full" else slice(pos - r, pos - r + 1)
    return to_host(out[tuple(o_cut)]), ref


def sample_points(cell: Cell, n: int, seed: int | None) -> np.ndarray:
    """``n`` interior points (z, y, x), uniform, drawn from ``seed`` (int64, shape (n, 3))."""
    if n < 0:
        raise ConfigError(f"points={n} must be >= 0", hint="e.g. 4096")
    rng = np.random.default_rng([0 if seed is None else seed, 0x5EED])
    r = cell.radius
    return np.stack([rng.integers(r, ext - r, size=n) for ext in cell.shape.array_shape], 1)


def _points(cell: Cell, fields: Mapping[str, Any], out: Any, kind: str,
            pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(out at ``pts``, the oracle's), the neighbourhood cubes gathered on the device."""
    spec, r = cell.stencil, cell.radius
    inp = fields["in"]
    xp = array_module(inp)
    reach = r * spec.steps
    d = np.arange(-reach, reach + 1)
    grid = cell.shape.array_shape
    glob = [pts[:, i][:, None, None, None] + d.reshape(shape)
            for i, shape in enumerate(((1, -1, 1, 1), (1, 1, -1, 1), (1, 1, 1, -1)))]
    idx = tuple(xp.asarray(np.clip(g, 0, n - 1)) for g, n in zip(glob, grid, strict=True))
    cube = to_host(inp[idx])
    coef = fields.get("coef")
    ccube = None if coef is None else to_host(coef[idx])
    res = _sweep(spec, cube, ccube, (glob[0], glob[1], glob[2]), grid)
    ref = res[:, reach, reach, reach]
    shift = 0 if kind == "full" else r
    xo = array_module(out)
    at = tuple(xo.asarray(pts[:, i] - shift) for i in range(3))
    return to_host(out[at]), ref
