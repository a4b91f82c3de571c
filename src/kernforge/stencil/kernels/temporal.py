"""The temporal-blocking design for multi-step star_1 (2.5D blocking, all steps in one launch).

A block owns an extended ``tx x ty`` tile (the output tile plus a ``T``-wide halo, recomputed
redundantly) and marches up z. Stage ``s`` (1..T) computes step ``s`` of plane ``k - 2s`` at
iteration ``k`` from step ``s-1``'s planes ``p-1, p, p+1``: those come from a three-deep register
queue per stage (z neighbours) and, for the centre plane, from a shared-memory copy (x and y
neighbours). The lag of two planes per stage lets every stage run in the same iteration with a
single barrier: each iteration writes all centre planes to shared memory (double-buffered by
iteration parity), synchronizes once, then runs the stages from the last to the first so each
reads its input queue before the previous stage pushes into it. The grid is read once (plus the
halo overlap) and the interior written once for all ``T`` steps. Boundary points keep their
input value at every step; points outside the grid read as zero and never reach the output.

Parameters: ``tx, ty`` (extended tile = block), ``lz`` (output planes per block, 0 = all),
``fs`` (steps fused per launch: ``fs < T`` applies the cell in ``T/fs`` launches that ping-pong
through ``tmp`` like :func:`.common.ping_pong`; a smaller halo, more DRAM traffic), ``minb``
(``__launch_bounds__`` minimum blocks per SM), ``pipe`` (0: this module's kernel; 1: the
pipelined kernel of :mod:`.temporal_pipe`, which adds ``pf`` planes in flight and ``cx`` x ``cy``
points per thread, and ``fi``, a boundary-free body for the blocks and iterations that touch no
boundary). ``pipe=0, fs=T, minb=1`` is the first design, byte for byte. ``faces``: a time
loop's face rules after every step, folded into both kernels (:mod:`.temporal_faces`,
:mod:`.temporal_pipe_faces`).
"""

from __future__ import annotations

from .. import faces as fc
from ..operator import Launch, Operator
from ..spec import Cell, Precision
from . import temporal_faces, temporal_pipe, temporal_pipe_faces
from .common import (
    XYZ,
    DoesNotFit,
    TileIndex,
    cdiv,
    extents,
    header,
    launch_order,
    literal,
    load,
    ping_pong,
    store,
    tile_index,
    weight_names,
)
from .design import BIT, Design, Space, knobs, precision_options

FIRST = {"pipe": 0, "fs": 0, "minb": 1, "pf": 1, "cx": 1, "cy": 1, "fi": 0, "h2": 0, "gb": 0}  # the first design's


def _stage(cell: Cell, s: int, steps: int) -> str:
    w = dict(zip(cell.stencil.offsets, weight_names(cell), strict=True))
    prev = s - 1
    sm = f"sm[par][{prev}]"
    expr = (f"{w[(0, 0, 0)]} * b{prev} + {w[(-1, 0, 0)]} * a{prev} + {w[(1, 0, 0)]} * c{prev}"
            f" + {w[(0, -1, 0)]} * {sm}[ym][tx] + {w[(0, 1, 0)]} * {sm}[yp][tx]"
            f" + {w[(0, 0, -1)]} * {sm}[ty][xm] + {w[(0, 0, 1)]} * {sm}[ty][xp]")
    tail = ""
    if s < steps:
        done = f"a{s} = b{s}; b{s} = c{s}; c{s} = v;"
        # one more shift past the last plane: when the range ends at the grid's top, the next
        # stage's last plane (the boundary NZ-1) must see it as its centre
        tail = f" else if (p == hi{s}) {{ a{s} = b{s}; b{s} = c{s}; }}"
    else:
        done = ("if (owner && p >= z0 && p < z1) "
                f"dst[(p * NY + gy) * NX + gx] = {store(cell.precision, 'v')};")
    return f"""    {{  // stage {s}: step {s} of plane k - {2 * s}
      const long p = k - {2 * s};
      if (p >= lo{s} && p < hi{s}) {{
        const ACC v = (inner && p >= 1 && p < NZ - 1) ? ({expr}) : b{prev};
        {done}
      }}{tail}
    }}
"""


def _source(cell: Cell, tx: int, ty: int, lz: int, steps: int, minb: int,
            bi: TileIndex = XYZ) -> str:
    p = cell.precision
    bx, by = tx - 2 * steps, ty - 2 * steps
    weights = "".join(f"constexpr ACC {n} = {literal(w, p)};\n"
                      for n, w in zip(weight_names(cell), cell.stencil.weights, strict=True))
    queues = " ".join(f"ACC a{s} = 0, b{s} = 0, c{s} = 0;" for s in range(steps))
    bounds = "\n".join(
        f"  const long lo{s} = z0 - {steps - s} > 0 ? z0 - {steps - s} : 0;\n"
        f"  const long hi{s} = z1 + {steps - s} < NZ ? z1 + {steps - s} : NZ;"
        for s in range(steps + 1))
    centres = "\n".join(f"    sm[par][{s}][ty][tx] = b{s};" for s in range(steps))
    stages = "".join(_stage(cell, s, steps) for s in range(steps, 0, -1))
    return f"""{header(cell)}{extents(cell)}typedef {p.acc_ctype} ACC;
{weights}constexpr int T = {steps};
extern "C" __global__ void __launch_bounds__({tx * ty}{f", {minb}" if minb > 1 else ""})
temporal(const {p.ctype}* __restrict__ src, {p.ctype}* __restrict__ dst) {{
  __shared__ ACC sm[2][T][{ty}][{tx}];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int xm = tx > 0 ? tx - 1 : 0, xp = tx < {tx - 1} ? tx + 1 : {tx - 1};
  const int ym = ty > 0 ? ty - 1 : 0, yp = ty < {ty - 1} ? ty + 1 : {ty - 1};
  const long gx = 1 + (long){bi.x} * {bx} - T + tx;
  const long gy = 1 + (long){bi.y} * {by} - T + ty;
  const bool in_grid = gx >= 0 && gx < NX && gy >= 0 && gy < NY;
  const bool inner = gx >= 1 && gx < NX - 1 && gy >= 1 && gy < NY - 1;
  const bool owner = inner && tx >= T && tx < T + {bx} && ty >= T && ty < T + {by};
  const long z0 = 1 + (long){bi.z} * {lz};
  const long z1 = z0 + {lz} < NZ - 1 ? z0 + {lz} : NZ - 1;
{bounds}
  {queues}
  ACC nxt = in_grid ? {load(p, "src[(lo0 * NY + gy) * NX + gx]")} : (ACC)0;
  for (long k = lo0 + 1; k < hi{steps} + {2 * steps}; ++k) {{
    const int par = k & 1;
    if (k - 1 <= hi0) {{  // push input plane k-1 (one stale push past the top), prefetch k
      a0 = b0; b0 = c0; c0 = nxt;
      if (k < hi0 && in_grid) nxt = {load(p, "src[(k * NY + gy) * NX + gx]")};
    }}
{centres}
    __syncthreads();
{stages}  }}
}}
"""


def shared_bytes(cell: Cell, tx: int, ty: int, steps: int | None = None) -> int:
    item = 8 if cell.precision.acc_ctype == "double" else 4
    return 2 * (steps or cell.stencil.steps) * tx * ty * item


def generate(cell: Cell, tx: int = 32, ty: int = 32, lz: int = 0, pipe: int = 0, fs: int = 0,
             minb: int = 1, pf: int = 1, cx: int = 1, cy: int = 1, fi: int = 0, h2: int = 0,
             zo: int = 0, faces: fc.Groups = (), gb: int = 0) -> Operator:
    """``faces``: a time loop's face rules applied after every step, all steps in one launch
    (:mod:`.temporal_faces` for the first kernel, :mod:`.temporal_pipe_faces` with ``pipe=1``;
    there ``gb=1`` publishes the stages' values for the gathers in a buffer of their own: one
    barrier less per iteration of a block on a face, ``T`` staged planes more)."""
    st = cell.stencil
    if not st.temporal or st.kind != "star" or st.radius != 1:
        raise DoesNotFit(f"temporal handles multi-step star_1 stencils, not {st.name}")
    fs = fs or st.steps
    if fs < 1 or st.steps % fs or minb not in (1, 2, 3, 4) or pipe not in (0, 1):
        raise DoesNotFit(f"fs={fs} must divide the {st.steps} steps; minb in 1..4; pipe 0 or 1")
    if fi not in (0, 1) or (fi and not pipe):
        raise DoesNotFit("fi (the boundary-free body for inner blocks) is 0 or 1, with pipe=1")
    if h2 not in (0, 1) or (h2 and not pipe):
        raise DoesNotFit("h2 (half2 arithmetic) is 0 or 1, with pipe=1")
    if tx * ty > 1024 or tx * ty * minb > 2048:
        raise DoesNotFit(f"a {tx}x{ty} block has too many threads (for {minb} per SM)")
    if gb not in (0, 1) or (gb and not (pipe and faces)):
        raise DoesNotFit("gb (the gathers' own buffer) is 0 or 1, with pipe=1 and face rules")
    bi = tile_index(zo)  # the launch order: where the tile coordinates are
    faces = tuple(tuple(g) for g in faces if g)
    if faces and fs != st.steps:
        raise DoesNotFit("face rules fold into the temporal kernels with all steps in one "
                         "launch (fs=0)")
    nz_int = cell.shape.nz if faces else cell.shape.nz - 2  # face rules: every plane is output
    lz = nz_int if lz <= 0 else min(lz, nz_int)
    params: dict[str, int | str] = {"tx": tx, "ty": ty, "lz": lz, "steps": st.steps}
    # the parameters added after the first design appear only with a value of their own, so
    # its operators keep their keys
    extra = {"pipe": pipe, "fs": 0 if fs == st.steps else fs, "minb": minb, "pf": pf, "cx": cx,
             "cy": cy, "fi": fi, "h2": h2, "gb": gb}
    params.update({k: v for k, v in extra.items() if v != FIRST[k]})
    if faces:
        params["faces"] = fc.describe(faces)
    if pipe:
        temporal_pipe.check(cell, fs, tx, ty, cx, cy, pf, minb, h2)
        if faces:
            _, _, _, bw, bh = temporal_pipe.geometry(cell, fs, tx, ty, cx, cy, True)
            temporal_pipe_faces.check(cell, faces, bw, bh, lz, h2)
        source = temporal_pipe.source(cell, fs, tx, ty, cx, cy, lz, pf, minb, fi, h2, bi,
                                      faces, gb)
        grid = temporal_pipe.grid(cell, fs, tx, ty, cx, cy, lz, bool(faces))
        smem = temporal_pipe.shared_bytes(cell, fs, tx, ty, cx, cy, h2) * (3 if gb else 2) // 2
    else:
        if (pf, cx, cy) != (1, 1, 1):
            raise DoesNotFit("pf, cx and cy need the pipelined kernel (pipe=1)")
        if min(tx, ty) <= 2 * fs:
            raise DoesNotFit(f"the tile {tx}x{ty} must exceed twice the {fs} fused steps")
        if shared_bytes(cell, tx, ty, fs) > 48 * 1024:
            raise DoesNotFit(f"a {tx}x{ty} tile needs too much static shared memory")
        bx, by = tx - 2 * fs, ty - 2 * fs
        if faces:
            temporal_faces.check(cell, faces, tx, ty, lz, fs)
            source = temporal_faces.source(cell, tx, ty, lz, fs, minb, faces, bi)
            grid = temporal_faces.grid(cell, tx, ty, lz, fs)
        else:
            source = _source(cell, tx, ty, lz, fs, minb, bi)
            grid = (cdiv(cell.shape.nx - 2, bx), cdiv(cell.shape.ny - 2, by), cdiv(nz_int, lz))
        smem = 0
    launches = tuple(Launch("temporal", grid, (tx, ty, 1), (a, b), smem)
                     for a, b in ping_pong(st.steps // fs))
    return launch_order(Operator(cell.id, "temporal", params, source, launches), zo)


def space(cell: Cell) -> Space:
    """Each parameter's values, the default first (``lz=0``: whole columns)."""
    ty = (16, 32) if cell.precision is Precision.FP64 else (32, 16)
    tp: Space = {
        "lz": (64, 128, 32, 16, 0), "ty": ty, "tx": (32, 64), "pipe": (1, 0),
        "pf": (1, 2, 3, 4), "cx": (1, 2, 4), "cy": (1, 2), "minb": (1, 2, 3, 4),
        "fs": (0, 2), "zo": BIT, "fi": BIT}
    return {**tp, **precision_options(cell, cw=False)}


KNOBS = knobs(
    "lz", "ty", "tx", "pf", "minb", "zo",
    pipe="pipelined kernel: uniform stages statically unrolled (no range predicates, no moves)",
    cx="x points per thread: register blocking, wider loads, a smaller halo share",
    cy="y points per thread: register blocking, fewer shared-memory reads",
    fs="fused steps: steps per launch (a smaller halo, more DRAM traffic)",
    fi="boundary-free body: a copy of the loop body without the boundary selects, run by the "
       "blocks and iteration groups that touch no boundary (a fifth to a half fewer SASS "
       "instructions there)",
    h2="fp16 pairs: __half2 arithmetic over lane pairs in every step (the pipelined kernel)")

DESIGN = Design("temporal", {"temporal": 0}, space, generate, KNOBS)
