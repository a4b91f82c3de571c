"""The plain design for a lifted program: one thread per grid point (docs/stencil-programs.md).

Every output of the point, every face rule, the fused reductions (per block, then the last
block combines the blocks' partials). Reads of a point at least the program's reach inside
every face go straight to memory; nearer a face they follow the face's rule (zero, wrap,
clamp). Knobs: the block's extents ``bx``, ``by``, ``bz``; for a program with reductions,
``atomic`` (how the blocks combine their partials, :mod:`.codegen_reduce`).
"""

from __future__ import annotations

from . import expr as ex
from .binding import Binding
from .codegen import IDS, Context, Kernel, Refused, ceil_div
from .codegen_reduce import atomic_refusal
from .model import StencilProgram

DESIGN = "plain"
KNOBS = ("bx", "by", "bz", "atomic")
PRESETS = {1: ({"bx": 256, "by": 1, "bz": 1}, {"bx": 128, "by": 1, "bz": 1}),
           2: ({"bx": 32, "by": 8, "bz": 1}, {"bx": 64, "by": 4, "bz": 1}),
           3: ({"bx": 32, "by": 4, "bz": 2}, {"bx": 64, "by": 2, "bz": 2})}


def generate(p: StencilProgram, b: Binding, *, bx: int = 32, by: int = 4, bz: int = 1,
             atomic: int = 0) -> Kernel:
    """The plain operator for ``p`` bound by ``b``; :class:`Refused` with the reason."""
    nx, ny, nz = b.shape
    block = (bx, by if p.dims > 1 else 1, bz if p.dims > 2 else 1)
    ctx = Context(p, b, atomic=bool(atomic), tile=block)
    threads = block[0] * block[1] * block[2]
    if threads > 1024 or min(block) < 1:
        raise Refused(f"block {block}: 1 to 1024 threads", hint=f"knobs {KNOBS}")
    grid = (ceil_div(nx, block[0]), ceil_div(ny, block[1]), ceil_div(nz, block[2]))
    if grid[1] > 65535 or grid[2] > 65535 or grid[0] > 2 ** 31 - 1:
        raise Refused(f"grid {grid} exceeds the launch limits", hint="larger blocks")
    blocks = grid[0] * grid[1] * grid[2]
    reach = [0, 0, 0]
    for t in ctx.taps:
        reach = [max(r, abs(d)) for r, d in zip(reach, t.offset, strict=True)]
    rz, ry, rx = reach
    interior = (f"z >= {rz} && z < KF_NZ - {rz} && y >= {ry} && y < KF_NY - {ry} && "
                f"x >= {rx} && x < KF_NX - {rx}")

    def read(t: ex.Tap) -> str:
        if t.offset == (0, 0, 0):
            return f"kf_ld(f_{t.field}[i])"
        dz, dy, dx = t.offset
        return (f"(kf_int ? kf_ld(f_{t.field}[i + ({(dz * ny + dy) * nx + dx})]) : "
                f"{ctx.safe_read(t)})")

    # an axis the program has not is 0 (the compiler then drops its bounds checks)
    ys = f"(kf_i)blockIdx.y * {block[1]} + threadIdx.y" if p.dims > 1 else "0"
    zs = f"(kf_i)blockIdx.z * {block[2]} + threadIdx.z" if p.dims > 2 else "0"
    source = f"""{ctx.prelude()}{ctx.globals(blocks)}
__device__ __forceinline__ void kf_body({ctx.signature()}) {{
{IDS}{ctx.accumulators()}  const kf_i x = (kf_i)blockIdx.x * {block[0]} + threadIdx.x;
  const kf_i y = {ys};
  const kf_i z = {zs};
  const bool kf_ok = x < KF_NX && y < KF_NY && z < KF_NZ;
  const bool kf_int = {interior};
  const kf_i i = (z * KF_NY + y) * KF_NX + x;
  (void)kf_int;
{ctx.point(read, "  ")}{ctx.finish(threads, blocks)}}}
"""
    knobs = {"bx": block[0], "by": block[1], "bz": block[2]}
    if p.reductions:
        knobs["atomic"] = int(bool(atomic))
    return Kernel(DESIGN, knobs, source, ctx.args(), grid, block)


def presets(p: StencilProgram) -> list[dict[str, int]]:
    """The presets; with reductions that per-block atomics can combine, each with atomics
    first (no fence, counter or tail per launch), then each with the last block."""
    base = [dict(k) for k in PRESETS[p.dims]]
    if not p.reductions or atomic_refusal(p):
        return base
    return [{**k, "atomic": 1} for k in base] + [{**k, "atomic": 0} for k in base]
