"""The plain design for a lifted program: one thread per grid point (docs/stencil-programs.md).

Every output of the point, every face rule, the fused reductions (per block, then the last
block combines the blocks' partials). Reads of a point at least the program's reach inside
every face go straight to memory; nearer a face they follow the face's rule (zero, wrap,
clamp). Knobs: the block's extents ``bx``, ``by``, ``bz``; for a program with reductions,
``atomic`` (how the blocks combine their partials, :mod:`.codegen_reduce`).

The knob space the forge searches (:func:`space`: each knob's values for a program, the
presets' among them; :func:`refusal`: why a combination generates nothing, decided without
generating it: more than 1024 threads, a grid past the launch limits, atomics the program's
reductions cannot use; :func:`presets`: the starting points).
"""

from __future__ import annotations

from collections.abc import Mapping

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
# the values the search tries per knob and dimensionality (the presets' are added)
VALUES: dict[str, dict[int, tuple[int, ...]]] = {
    "bx": {1: (32, 64, 128, 256, 512, 1024), 2: (8, 16, 32, 64, 128, 256),
           3: (8, 16, 32, 64, 128, 256)},
    "by": {2: (1, 2, 4, 8, 16, 32), 3: (1, 2, 4, 8, 16)}, "bz": {3: (1, 2, 4, 8)}}


def generate(p: StencilProgram, b: Binding, *, bx: int = 32, by: int = 4, bz: int = 1,
             atomic: int = 0) -> Kernel:
    """The plain operator for ``p`` bound by ``b``; :class:`Refused` with the reason."""
    nx, ny, nz = b.shape
    block = (bx, by if p.dims > 1 else 1, bz if p.dims > 2 else 1)
    why = refusal(p, b.shape, {"bx": bx, "by": by, "bz": bz, "atomic": atomic})
    if why is not None:
        raise why
    ctx = Context(p, b, atomic=bool(atomic), tile=block)
    threads = block[0] * block[1] * block[2]
    grid = (ceil_div(nx, block[0]), ceil_div(ny, block[1]), ceil_div(nz, block[2]))
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


def applicable(p: StencilProgram) -> str | None:
    """Why the design generates nothing for ``p`` whatever its knobs (None: it may)."""
    return None


def space(p: StencilProgram) -> dict[str, tuple[int, ...]]:
    """Each knob's values for ``p`` (its presets' among them): the block's extents along the
    program's axes; ``atomic`` where its reductions can be combined by atomics."""
    used = presets(p)
    out: dict[str, tuple[int, ...]] = {}
    for knob, by_dims in VALUES.items():
        if p.dims in by_dims:
            out[knob] = tuple(sorted({*by_dims[p.dims], *(k[knob] for k in used)}))
    if p.reductions and not atomic_refusal(p):
        out["atomic"] = (0, 1)
    return out


def refusal(p: StencilProgram, shape: tuple[int, int, int],
            knobs: Mapping[str, int]) -> Refused | None:
    """Why ``knobs`` generate no operator for ``p`` on a grid of ``shape`` (decided without
    generating it), None when they do; a knob left out takes :func:`generate`'s default."""
    bx, by, bz = knobs.get("bx", 32), knobs.get("by", 4), knobs.get("bz", 1)
    block = (bx, by if p.dims > 1 else 1, bz if p.dims > 2 else 1)
    if block[0] * block[1] * block[2] > 1024 or min(block) < 1:
        return Refused(f"block {block}: 1 to 1024 threads", hint=f"knobs {KNOBS}")
    grid = [ceil_div(n, k) for n, k in zip(shape, block, strict=True)]
    if grid[1] > 65535 or grid[2] > 65535 or grid[0] > 2 ** 31 - 1:
        return Refused(f"grid {tuple(grid)} exceeds the launch limits", hint="larger blocks")
    if knobs.get("atomic") and (why := atomic_refusal(p)):
        return Refused(why, hint="atomic=0: the last block combines the partials")
    return None
