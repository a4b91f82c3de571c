"""The z-marching design for star stencils (any radius) and the variable-coefficient star.

Each thread owns ``VX`` consecutive x points of one (x, y) column and marches up a chunk of
``LZ`` planes in z. The ``2R+1`` values of its column along z live in a register queue, so every
input element is read from DRAM once by its owner; x and y neighbours come from the L1/L2
caches (aligned vector loads for the owner's lanes, scalar loads for the x halo). Threads are
laid out over the whole grid (absolute coordinates) so vector loads stay aligned; lanes outside
the interior load but never store.

Parameters: ``tx, ty`` (block), ``vx`` (lanes per thread: 1, 2, 4 or 8), ``lz`` (planes per
block; 0 = the whole interior), ``pf`` (planes in flight per thread), ``smem`` (stage each
plane's tile in shared memory), ``xs`` (the x halo by warp shuffles instead of scalar
loads) and ``pn`` (the x and y neighbours loaded one plane ahead): see :mod:`.zmarch_staged`;
``h2`` (fp16: ``__half2`` arithmetic): see :mod:`.zmarch_h2`; ``cw`` (fp64: the weights in
constant memory, no 64-bit immediates: :func:`.common.constant_weight_defs`); ``ry`` (rows per
thread) and ``sc`` (streaming stores): see :mod:`.zmarch_rows`; ``l2p`` (every kernel): the
vector loads from the global arrays carry an L2 prefetch size (:func:`.common.vec_loads`);
``minb`` (every kernel):
``__launch_bounds__`` minimum resident blocks per SM, a register cap (:func:`.common.bounds`);
``zo`` (every kernel): the z-chunks first in the launch order, the tile coordinates emitted
from the other ``blockIdx`` components (:func:`.common.tile_index`, :func:`.common.launch_order`);
``pf=1, smem=0, xs=0, pn=0, h2=0, ry=1, sc=0, minb=1`` is this module's kernel. (``l1``, the
largest L1, is a launch attribute that :func:`..matrix.build` applies:
:func:`.common.largest_l1`.)
"""

from __future__ import annotations

from ..operator import Launch, Operator
from ..spec import Cell, Precision
from . import zmarch_h2, zmarch_rows, zmarch_staged
from .common import (
    GLOBAL_VEC,
    XYZ,
    DoesNotFit,
    TileIndex,
    bounds,
    cdiv,
    check_minb,
    constant_weight_defs,
    extents,
    header,
    launch_order,
    load,
    ping_pong,
    store,
    tile_index,
    vec_loads,
    weight_defs,
)
from .design import BIT, L2P, MINB, UNTUNED, Design, Space, knobs, precision_options


def _vec_struct(cell: Cell, vx: int) -> str:
    t = cell.precision.ctype
    align = cell.precision.itemsize * vx
    return f"struct __align__({align}) Vec {{ {t} v[{vx}]; }};\n"


def _body(cell: Cell, vx: int, ld: str = GLOBAL_VEC) -> str:
    """Statements computing ``res[l]`` for every lane from the queue and cached loads (``ld``:
    the opening of a global ``Vec`` load, :func:`.common.vec_loads`)."""
    p = cell.precision
    acc = p.acc_ctype
    r = cell.radius
    out = []
    # y neighbours: aligned vector loads of rows y +- d in the current plane
    for d in range(1, r + 1):
        for sgn, tag in ((-1, "m"), (1, "p")):
            out.append(f"const Vec y{tag}{d} = {ld}"
                       f"src + base + ({sgn * d}L) * NX);")
    # x halo: scalar loads left of lane 0 and right of lane vx-1
    for d in range(1, r + 1):
        out.append(f"const {acc} xl{d} = {load(p, f'src[base - {d}]')};")
        out.append(f"const {acc} xr{d} = {load(p, f'src[base + {vx - 1 + d}]')};")
    if cell.stencil.kind == "varcoeff":
        out.append(f"const Vec cf = {ld}coef + base);")
    out += zmarch_staged.lane_sums(cell, vx, lambda v: load(p, v), "cf")
    return "\n      ".join(out)


def _kernel(cell: Cell, tx: int, ty: int, vx: int, lz: int, lb: str, pre: str = "",
            ld: str = GLOBAL_VEC, bi: TileIndex = XYZ) -> str:
    p = cell.precision
    t, acc = p.ctype, p.acc_ctype
    r = cell.radius
    coef = f"const {t}* __restrict__ coef, " if cell.stencil.kind == "varcoeff" else ""
    qn = 2 * r + 1
    loadq = "\n".join(
        f"    q[{{j}}][{lane}] = {load(p, f'c.v[{lane}]')};" for lane in range(vx))
    shift = "\n".join(f"      #pragma unroll\n      for (int j = 0; j < {qn - 1}; ++j) "
                      f"q[j][{lane}] = q[j + 1][{lane}];" for lane in range(vx))
    lanes = "\n".join(
        f"        if (x0 + {lane} >= R && x0 + {lane} < NX - R) "
        f"dst[base + {lane}] = {store(p, f'res[{lane}]')};" for lane in range(vx))
    whole = "".join(f" o.v[{lane}] = {store(p, f'res[{lane}]')};" for lane in range(vx))
    stores = (f"      if (x0 >= R && x0 + {vx} <= NX - R) {{\n        Vec o;{whole}\n"
              f"        *reinterpret_cast<Vec*>(dst + base) = o;\n      }} else {{\n"
              f"{lanes}\n      }}")
    return f"""
{pre}extern "C" __global__ void __launch_bounds__({lb})
zmarch(const {t}* __restrict__ src, {coef}{t}* __restrict__ dst) {{
  const long x0 = ((long){bi.x} * {tx} + threadIdx.x) * {vx};
  const long y = (long){bi.y} * {ty} + threadIdx.y;
  if (y < R || y >= NY - R || x0 >= NX - R || x0 + {vx} <= R) return;
  const long zb = R + (long){bi.z} * {lz};
  const long ze = zb + {lz} < NZ - R ? zb + {lz} : NZ - R;
  {acc} q[{qn}][{vx}];
  #pragma unroll
  for (int j = 0; j < {qn - 1}; ++j) {{
    const Vec c = {ld}src + ((zb - R + j) * NY + y) * NX + x0);
{loadq.replace('{j}', 'j')}
  }}
  Vec nxt = {ld}src + ((zb + R) * NY + y) * NX + x0);
  for (long z = zb; z < ze; ++z) {{
    {{
      const Vec c = nxt;  // prefetched one plane ahead: its latency hides behind this plane
{loadq.replace('{j}', str(qn - 1)).replace('    q', '      q')}
    }}
    if (z + 1 < ze) nxt = {ld}src + ((z + 1 + R) * NY + y) * NX + x0);
    const long base = (z * NY + y) * NX + x0;
    {{
      {acc} res[{vx}];
      {_body(cell, vx, ld)}
{stores}
    }}
    {{
{shift}
    }}
  }}
}}
"""


def generate(cell: Cell, tx: int = 32, ty: int = 8, vx: int = 4, lz: int = 0, pf: int = 1,
             smem: int = 0, xs: int = 0, pn: int = 0, h2: int = 0, cw: int = 0, ry: int = 1,
             sc: int = 0, minb: int = 1, l2p: int = 0, zo: int = 0) -> Operator:
    if cell.stencil.kind not in ("star", "varcoeff"):
        raise DoesNotFit(f"zmarch handles star stencils, not {cell.stencil.name}")
    if cell.shape.nx % vx:
        raise DoesNotFit(f"vx={vx} must divide NX={cell.shape.nx} (aligned vector loads)")
    if vx < cell.radius:
        raise DoesNotFit(f"vx={vx} must be >= the radius {cell.radius} (x halo loads)")
    if pf not in (1, 2, 3, 4) or smem not in (0, 1) or xs not in (0, 1) or pn not in (0, 1):
        raise DoesNotFit("pf in 1..4; smem, xs and pn 0 or 1")
    if pn and smem:
        raise DoesNotFit("pn (neighbours loaded a plane ahead) is for the unstaged kernel")
    if h2 and (cell.precision is not Precision.FP16 or vx % 2 or smem or xs or pn):
        raise DoesNotFit("h2 needs fp16, an even vx and smem=xs=pn=0")
    if cw not in (0, 1) or (cw and cell.precision is not Precision.FP64):
        raise DoesNotFit("cw (weights in constant memory) is for fp64")
    if ry not in (1, 2, 4) or sc not in (0, 1):
        raise DoesNotFit("ry in 1, 2, 4; sc 0 or 1")
    if (ry > 1 or sc) and (pf != 1 or smem or xs or pn or h2):
        raise DoesNotFit("ry and sc are for the plain kernel (pf=1, smem=xs=pn=h2=0)")
    if ry > cell.shape.ny - 2 * cell.radius:
        raise DoesNotFit(f"ry={ry} exceeds the {cell.shape.ny - 2 * cell.radius} interior rows")
    if xs and smem:
        raise DoesNotFit("xs (x halo by warp shuffles) is for the unstaged kernel (smem=0)")
    if smem and (ty < 2 * cell.radius or tx < 2):
        raise DoesNotFit(f"smem=1 needs ty >= {2 * cell.radius} and tx >= 2 (halo loads)")
    check_minb(tx * ty, minb)
    bi = tile_index(zo)  # the launch order: where the tile coordinates are
    nz_int = cell.shape.nz - 2 * cell.radius
    lz = nz_int if lz <= 0 else min(lz, nz_int)
    weights = constant_weight_defs(cell) if cw else weight_defs(cell)
    head = header(cell) + extents(cell) + weights + _vec_struct(cell, vx)
    params = {"tx": tx, "ty": ty, "vx": vx, "lz": lz}
    # pf and smem appear only with a value of their own, so the first kernel keeps its keys
    params.update({k: v for k, v, first in (("pf", pf, 1), ("smem", smem, 0), ("xs", xs, 0),
                                             ("pn", pn, 0), ("h2", h2, 0), ("cw", cw, 0),
                                             ("ry", ry, 1), ("sc", sc, 0), ("minb", minb, 1),
                                             ("l2p", l2p, 0))
                   if v != first})
    shared = zmarch_staged.shared_bytes(cell, tx, ty, vx) if smem else 0
    if shared > zmarch_staged.MAX_SHARED:
        raise DoesNotFit("the staged planes exceed the shared memory of a block")
    lb = bounds(tx * ty, minb)
    pre, ld = vec_loads(cell.precision.ctype, vx, l2p)  # the global Vec loads, with l2p
    if h2:
        source = head + zmarch_h2.kernel(cell, tx, ty, vx, lz, pf, lb, pre, ld, bi)
    elif ry > 1 or sc:
        source = head + zmarch_rows.kernel(cell, tx, ty, vx, lz, ry, sc, lb, pre, ld, bi)
    elif pf == 1 and not smem and not xs and not pn:
        source = head + _kernel(cell, tx, ty, vx, lz, lb, pre, ld, bi)
    else:
        source = head + zmarch_staged.kernel(cell, tx, ty, vx, lz, pf, smem, xs, pn, lb=lb,
                                             pre_kernel=pre, ld=ld, bi=bi)
    rows = cell.shape.ny if ry == 1 and not sc else cell.shape.ny - 2 * cell.radius
    grid = (cdiv(cell.shape.nx, tx * vx), cdiv(rows, ty * ry), cdiv(nz_int, lz))
    coef = ("coef",) if cell.stencil.kind == "varcoeff" else ()
    launches = tuple(Launch("zmarch", grid, (tx, ty, 1), (a,) + coef + (b,), shared)
                     for a, b in ping_pong(cell.stencil.steps))  # a temporal cell: one per step
    return launch_order(Operator(cell.id, "zmarch", params, source, launches), zo)


VX = {Precision.FP16: (8, 4), Precision.FP32: (4, 2), Precision.FP64: (2, 4)}


def space(cell: Cell) -> Space:
    """Each parameter's values, the default first."""
    zs: Space = {
        "vx": VX[cell.precision], "lz": (64, 32, 128, 16, 8), "ty": (8, 4, 16),
        "tx": (32, 64, 16), "pf": (1, 2, 4), "smem": BIT, "xs": BIT, "pn": BIT,
        "ry": (1, 2, 4), "sc": BIT, "minb": MINB, "l1": BIT, "zo": BIT, "l2p": L2P}
    return {**zs, **precision_options(cell)}


# z-chunks longer than 128 planes are not offered: whole columns ran 1.03-2.1x slower than the
# incumbents in every 1024^3 cell on the H200 (parallelism and the streaming order matter more
# there than the z halo re-read through L2)
KNOBS = knobs(
    "vx", "lz", "ty", "tx", "pf", "sc", "minb", "l1", "zo", "l2p", "cw",
    smem="staged planes: each plane's tile in shared memory (2.5D) for the x/y neighbours",
    xs="x halo by warp shuffles: from the neighbouring lanes (fewer L1/L2 requests per point: "
       "the star kernels are L2-throughput-bound on the H200)",
    pn="neighbours a plane ahead: the x/y neighbours of the next plane loaded during this one "
       "(latency of L1 misses off the critical path; more registers)",
    ry="rows per thread: y neighbours from the thread's own queues (fewer L1/L2 requests per "
       "output)",
    h2="fp16 pairs: __half2 arithmetic (HFMA2) over lane pairs, fp16 sums")

# the plain kernel the forge's source probes rewrite (``kernforge stencil probe``, its ``+l2``,
# ``+bl2``, ``+zo``, ``+zr``): each option at this value, but those a probe takes at any value
# (:data:`PROBE_FREE`); the order is the one a refusal names them in
PLAIN = {"pf": 1, "pn": 0, "xs": 0, "ry": 1, "sc": 0, "h2": 0, "smem": 0,
         "zo": 0}  # zo: blockIdx already renamed
PROBE_FREE = {"prefetch": ("pn", "xs", "h2", "smem"), "z_order": ("pf", "xs")}


def row_points(params: dict[str, int]) -> int:
    """x points of one warp row: what a row's bulk prefetch requests."""
    return params["tx"] * params["vx"]


# ``minb``: the register cap spills wherever it binds (0.08-1.01x on the H200): not searched;
# ``ry``: rows with their own queues here, output rows of a shared-memory tile in the plane
# sweep: never carried between the two
DESIGN = Design("zmarch", {"star": 0, "varcoeff": 0, "temporal": 1}, space, generate, KNOBS,
                untuned=(*UNTUNED, "minb"), unshared=("ry",))
