"""The naive design: one thread per interior point, every neighbour read from global memory.

This is also the matrix's "naive one-thread-per-point CUDA kernel" baseline (with default
``block``), compiled and measured with the same harness as every forged operator.
"""

from __future__ import annotations

from ..operator import Launch, Operator
from ..spec import Cell
from .common import cdiv, extents, header, load, ping_pong, store, weight_defs, weight_names
from .design import Design, Space, knobs


def _sum(cell: Cell, src: str) -> str:
    """The weighted sum at (z, y, x) of ``src`` (varcoeff: w0*c + coef*sum of neighbours)."""
    p = cell.precision
    terms = []
    for w, (dz, dy, dx) in zip(weight_names(cell), cell.stencil.offsets, strict=True):
        idx = f"i + ({dz * cell.shape.nx * cell.shape.ny}L) + ({dy * cell.shape.nx}L) + ({dx}L)"
        terms.append((w, load(p, f"{src}[{idx}]")))
    if cell.stencil.kind == "varcoeff":
        center = f"{terms[0][0]} * {terms[0][1]}"
        rest = " + ".join(f"{w} * {v}" for w, v in terms[1:])
        return f"{center} + {load(p, 'coef[i]')} * ({rest})"
    return " + ".join(f"{w} * {v}" for w, v in terms)


def _kernel(cell: Cell, name: str, src: str, dst: str) -> str:
    t = cell.precision.ctype
    acc = cell.precision.acc_ctype
    coef = f"const {t}* __restrict__ coef, " if cell.stencil.kind == "varcoeff" else ""
    rz = "R" if cell.stencil.dims == 3 else "0"  # a planar stencil: every z-plane, no z halo
    return f"""
extern "C" __global__ void {name}(const {t}* __restrict__ {src}, {coef}{t}* __restrict__ {dst}) {{
  const long x = R + blockIdx.x * (long)blockDim.x + threadIdx.x;
  const long y = R + blockIdx.y * (long)blockDim.y + threadIdx.y;
  const long z = {rz} + blockIdx.z * (long)blockDim.z + threadIdx.z;
  if (x >= NX - R || y >= NY - R || z >= NZ - {rz}) return;
  const long i = (z * NY + y) * NX + x;
  const {acc} v = {_sum(cell, src)};
  {dst}[i] = {store(cell.precision, 'v')};
}}
"""


def generate(cell: Cell, block: tuple[int, int, int] = (32, 8, 1)) -> Operator:
    """One launch per step; a temporal cell ping-pongs between ``out`` and ``tmp``."""
    nz, ny, nx = cell.interior
    grid = (cdiv(nx, block[0]), cdiv(ny, block[1]), cdiv(nz, block[2]))
    coef = ("coef",) if cell.stencil.kind == "varcoeff" else ()
    source = header(cell) + extents(cell) + weight_defs(cell) + _kernel(cell, "naive", "src", "dst")
    launches = tuple(Launch("naive", grid, block, (a,) + coef + (b,)) for a, b in ping_pong(cell.stencil.steps))
    return Operator(cell.id, "naive", {"block": block}, source, launches)


def space(cell: Cell) -> Space:
    """The block shape, the default first."""
    return {"block": ((32, 8, 1), (32, 4, 2), (64, 4, 1), (128, 2, 1))}


# one thread per point: builds every cell, the fallback last
KNOBS = knobs(block="block shape: the thread block of the one-thread-per-point kernel")

DESIGN = Design("naive", {"star": 9, "box": 9, "varcoeff": 9, "temporal": 9}, space, generate,
                KNOBS, planar=True)
